"""WASM plugin dispatch against a shell hook spawn of /bin/true, and isolated against plain spawns.

    python bench/bench_plugins.py [--events 300] [--isolated 60] [--rounds 3]

Also, where componentize-py is installed: PRX's Python PDK example
(logger-hook: log, count the event in kv, publish an audit event) built into a
component as tests/fixtures/prx/README.md says, against a shell hook doing
the same work in a Python script (read the payload, log, count in a file,
print the audit event). kv and events are the local ones of ``hookbus plugins
test`` in both: the figure is dispatch and the plugin's own work.

Per event, one after another, in the same run: a plugin call as the worker
makes it (payload read, a thread, the time limit armed, on-event on the live
instance) for a core module and a component that return Ok; a shell hook
running /bin/true through the worker's runner (payload file, environment,
spawn, wait); the same hook isolated (bubblewrap + prlimit + a pids cgroup
where one can be made). Prints median microseconds per event and the ratios:
shell spawn / plugin dispatch (target: well over 10), isolated / plain.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus._sandbox.outcome import HookOutcome
from subscribers.plugins._host import load_code
from subscribers.plugins._manifest import load_manifest
from subscribers.plugins.plugin_worker import call_plugin
from subscribers.shell_hooks._hook_trial import make_event
from subscribers.shell_hooks._hooks_file import HOOKS_FILE, load
from subscribers.shell_hooks._shell import ShellRunner

SUBJECT = "prx.lifecycle.tool_call"
PAYLOAD = {"tool": "shell", "success": True, "output": "ok"}
CORE_OK = """(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "on-event") (param i32 i32 i32 i32) (result i64) (i64.const 0)))"""
COMPONENT_OK = """(component
  (core module $m
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32) (local.set $p (global.get $heap))
      (global.set $heap (i32.add (global.get $heap) (local.get 3))) (local.get $p))
    (func (export "on-event") (param i32 i32 i32 i32) (result i32)
      (global.set $heap (i32.const 1024)) (i32.store (i32.const 0) (i32.const 0)) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "on-event") (param "event" string) (param "payload-json" string) (result (result (error string)))
    (canon lift (core func $i "on-event") (memory (core memory $i "memory")) (realloc (core func $i "realloc")))))"""


SAME_WORK = """import json, os, sys, time
envelope = json.load(open(os.environ["ZERO_HOOK_PAYLOAD_FILE"]))
event = envelope["event"]
print(f"logger-hook: received event '{event}'", file=sys.stderr)
path = os.path.join(os.path.dirname(__file__), "counts.json")
counts = json.load(open(path)) if os.path.exists(path) else {}
counts[event] = counts.get(event, 0) + 1
json.dump(counts, open(path, "w"))
audit = {"event": event, "count": counts[event], "payload_keys": list(envelope), "ts_ms": int(time.time() * 1000)}
print(json.dumps(audit))
"""


def prx_component(workspace: Path) -> object | None:
    """PRX's logger-hook example as a loaded component, or None without componentize-py."""
    from tests.support.prx_build import EXAMPLE, build_logger_hook, componentize_py

    tool = componentize_py()
    if tool is None:
        return None
    folder = workspace / "plugins" / "logger-hook"
    folder.mkdir(parents=True)
    shutil.copy(EXAMPLE / "plugin.toml", folder / "plugin.toml")
    shutil.copy(build_logger_hook(tool), folder / "plugin.wasm")
    return load_code(load_manifest(folder))


def plugin(workspace: Path, name: str, wat: str) -> Path:
    folder = workspace / "plugins" / name
    folder.mkdir(parents=True)
    (folder / "plugin.wat").write_text(wat)
    (folder / "plugin.toml").write_text(
        f'[plugin]\nname = "{name}"\nwasm = "plugin.wat"\n\n[[capabilities]]\ntype = "hook"\nevents = ["tool_call"]\n'
    )
    return folder


async def per_event_us(one: Callable[[], Awaitable[object]], count: int) -> float:
    """Median microseconds of ``one()`` over ``count`` sequential calls."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        await one()
        times.append((time.perf_counter() - start) * 1e6)
    return median(times)


async def measure(workspace: Path, events: int, isolated: int) -> dict[str, float]:
    event = make_event(SUBJECT, PAYLOAD, "bench")
    core = load_code(load_manifest(plugin(workspace, "core", CORE_OK)))
    component = load_code(load_manifest(plugin(workspace, "component", COMPONENT_OK)))
    (workspace / HOOKS_FILE).write_bytes(
        orjson.dumps({"hooks": {"tool_call": [{"command": "/bin/true"}, {"command": "/bin/true", "isolation": True}]}})
    )
    plain_entry, isolated_entry = load(workspace / HOOKS_FILE).entries
    runner = ShellRunner(workspace)

    async def shell(entry: object) -> None:
        result = await runner.run(entry, event)  # type: ignore[arg-type]
        assert result.outcome is HookOutcome.OK, result

    async def wasm(code: object) -> None:
        result = await call_plugin(code, event, SUBJECT)  # type: ignore[arg-type]
        assert result.outcome is HookOutcome.OK, result

    figures = {
        "plugin, core module": await per_event_us(lambda: wasm(core), events),
        "plugin, component": await per_event_us(lambda: wasm(component), events),
        "shell hook /bin/true": await per_event_us(lambda: shell(plain_entry), events),
    }
    prx = prx_component(workspace)
    if prx is not None:
        script = workspace / "logger_hook.py"
        script.write_text(SAME_WORK)
        (workspace / HOOKS_FILE).write_bytes(
            orjson.dumps({"hooks": {"tool_call": [{"command": sys.executable, "args": [str(script)]}]}})
        )
        [python_entry] = load(workspace / HOOKS_FILE).entries
        figures["PRX-PDK component (logger-hook)"] = await per_event_us(lambda: wasm(prx), events)
        figures["shell hook, the same work in Python"] = await per_event_us(
            lambda: shell(python_entry), events // 5 or 1
        )
    if shutil.which("bwrap") and shutil.which("prlimit"):
        figures["shell hook /bin/true, isolated"] = await per_event_us(lambda: shell(isolated_entry), isolated)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--isolated", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            rounds.append(asyncio.run(measure(Path(tmp), args.events, args.isolated)))
    figures = {name: median([r[name] for r in rounds]) for name in rounds[0]}
    print_table(
        "per event, sequential (median of rounds)",
        [(name, f"{us:,.0f}") for name, us in figures.items()],
        ("what", "µs/event"),
    )
    shell = figures["shell hook /bin/true"]
    rows = []
    for name in ("plugin, core module", "plugin, component"):
        ratio = shell / figures[name]
        rows.append((f"shell spawn / {name}", f"{ratio:.1f}x", verdict(ratio, 10.0)))
    if "PRX-PDK component (logger-hook)" in figures:
        ratio = figures["shell hook, the same work in Python"] / figures["PRX-PDK component (logger-hook)"]
        rows.append(("shell spawn of the same work / PRX-PDK component", f"{ratio:.1f}x", verdict(ratio, 10.0)))
    if "shell hook /bin/true, isolated" in figures:
        cost = figures["shell hook /bin/true, isolated"] / shell
        rows.append(("isolated / plain spawn", f"{cost:.1f}x", "(the cost of isolation)"))
    print_table("ratios, same run", rows, ("ratio", "value", "target"))


if __name__ == "__main__":
    main()
