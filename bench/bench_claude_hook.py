"""Claude Code hook benchmark: a PreToolUse with one remote guard, through each path hookbus offers.

    python bench/bench_claude_hook.py [--runs 20]

One guard module (a tool.call handler) runs in a separate process; the relay
of ``hookbus up`` runs in this one, on its own connection, and so does the
HTTP endpoint (``POST /hooks/claude-code``, aiohttp, on a free port). Median
over ``--runs`` of:

- ``hookbus claude-hook`` (a process per hook, the one-shot path to the relay),
  against ``hookbus emit`` of one event (the process per hook hooks already
  pay) and against ``hookbus claude-hook`` without a relay (its own client);
- the HTTP endpoint (one local request), against a raw ``Bus.intercept`` of
  the same call in this process;
- ``hookbus claude-hook`` with ten matching script handlers (claude-hooks.json
  served in this process: the community guards of tests/fixtures/claude,
  each twice), against the same ten scripts run one after the other by a
  shell loop with the hook input on stdin (what a bare Claude Code setup
  pays per call, without the bus). Every run is checked to have gone through.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.common import median, print_table
from bus import Bus, Cancel, Continue, Decision, Module, NatsServer
from bus.adapters.claude_code import _http_hook as http_hook
from bus.adapters.claude_code.command_modules import MODULE, ClaudeHooksServer
from bus.adapters.claude_code.relay import Relay
from bus.testing import wait_for_chain
from subscribers.http_api.server import make_app, serve

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"
INPUT = {
    "session_id": "bench",
    "transcript_path": "/tmp/t.jsonl",
    "cwd": "/tmp",
    "permission_mode": "default",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf /"},
    "tool_use_id": "toolu_1",
}


def guard() -> Module:
    module = Module("benchguard")

    @module.stage("tool.call")
    async def no_rm(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("only by hand") if "rm -rf" in str(payload.get("input")) else Continue()

    return module


async def serve_guard(url: str) -> None:
    print("ready", flush=True)
    await guard().serve(url)


def timed(args: list[str], env: dict[str, str], stdin: str | None = None, cwd: Path = ROOT) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=cwd, input=stdin, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{args} failed: {done.stderr}")
    return elapsed


async def command_times(url: str, runs: int, state: Path) -> dict[str, list[float]]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}, "NATS_URL": url}
    env["XDG_STATE_HOME"] = str(state)
    hookbus = [sys.executable, "-m", "bus._cli"]
    hook, emit = [*hookbus, "claude-hook"], [*hookbus, "emit", "prx.lifecycle.tool_call", '{"tool": "Bash"}']
    times: dict[str, list[float]] = {"relay": [], "emit": [], "own": []}
    async with Bus(url, name="bench-relay") as bus:
        relay = Relay(bus)
        await relay.start()
        await wait_for_chain(bus, "tool.call", ["benchguard.no_rm"], timeout=30)
        for _ in range(runs):  # interleaved: drift hits every row alike
            times["relay"].append(await asyncio.to_thread(timed, hook, env, json.dumps(INPUT)))
            times["emit"].append(await asyncio.to_thread(timed, emit, env))
        await relay.stop()
    for _ in range(runs):
        times["own"].append(await asyncio.to_thread(timed, hook, env, json.dumps(INPUT)))
    return times


async def http_times(url: str, runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"http": [], "intercept": []}
    async with Bus(url, name="bench-http") as bus, Bus(url, name="bench-kernel") as kernel:
        await wait_for_chain(bus, "tool.call", ["benchguard.no_rm"], timeout=30)
        await wait_for_chain(kernel, "tool.call", ["benchguard.no_rm"], timeout=30)
        app = make_app(Path("/nonexistent/hooks.json"), TOKEN)
        app.router.add_post(http_hook.PATH, http_hook.handler(bus))  # behind the admin token
        payload = {"name": "Bash", "input": INPUT["tool_input"], "id": "toolu_1"}
        ctx = {"session": "bench", "agent": "claude-code"}
        async with serve(app, "127.0.0.1", 0) as base, aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            for _ in range(runs):
                started = time.perf_counter()
                async with session.post(f"{base}/hooks/claude-code", json=INPUT, headers=headers) as response:
                    answer = await response.text()
                if response.status != 200 or "deny" not in answer:
                    raise SystemExit(f"the endpoint did not deny: {response.status} {answer}")
                times["http"].append(time.perf_counter() - started)
                started = time.perf_counter()
                assert isinstance(await kernel.intercept("tool.call", payload, ctx), Cancel)
                times["intercept"].append(time.perf_counter() - started)
    return times


FIXTURES = ROOT / "tests" / "fixtures" / "claude"
#: The ten script handlers: the four node guards and the uv script, each twice (as their authors run them).
SCRIPTS = [
    *(f"node ~/.claude/hooks/{name}.js" for name in ("block-dangerous-commands", "protect-secrets", "git-safety",
                                                     "protect-tests")),
    "python3 $CLAUDE_PROJECT_DIR/.claude/hooks/pre_tool_use.py",
] * 2  # fmt: skip


async def script_times(url: str, runs: int, state: Path) -> dict[str, list[float]]:
    """claude-hook with ten script handlers against a shell loop running the same ten scripts."""
    import shutil

    workspace, home = state / "ws", state / "home"
    shutil.copytree(FIXTURES / "home", home, dirs_exist_ok=True)
    shutil.copytree(FIXTURES / "project" / ".claude", workspace / ".claude", dirs_exist_ok=True)
    groups = [{"matcher": "Bash", "hooks": [{"type": "command", "command": c}]} for c in SCRIPTS]
    config = {"hookbus": {"home": str(home)}, "hooks": {"PreToolUse": groups}}
    (workspace / "claude-hooks.json").write_text(json.dumps(config))
    benign = {**INPUT, "cwd": str(workspace), "tool_input": {"command": "ls -la"}}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}, "NATS_URL": url}
    env["XDG_STATE_HOME"] = str(state)
    loop_env = {**env, "HOME": str(home), "CLAUDE_PROJECT_DIR": str(workspace)}
    commands = " ".join(
        f"'{c.replace('~', str(home)).replace('$CLAUDE_PROJECT_DIR', str(workspace))}'" for c in SCRIPTS
    )
    loop = ["bash", "-c", f'input=$(cat); for c in {commands}; do echo "$input" | $c >/dev/null || exit 1; done']
    hook = [sys.executable, "-m", "bus._cli", "claude-hook"]
    times: dict[str, list[float]] = {"scripts": [], "loop": []}
    async with Bus(url, name="bench-scripts") as bus, Bus(url, trust_new=True) as kernel:
        server = ClaudeHooksServer(bus, workspace, url)
        await server.start()
        view = await kernel.middleware.start()
        wanted = f"{MODULE}.PreToolUse"
        await view.wait_until(lambda: wanted in {link.decl.qualname for link in view.chains["tool.call"].links}
                              if "tool.call" in view.chains else False, 30)  # fmt: skip
        forced = {**benign, "tool_input": {"command": "git push --force origin main"}}  # only git-safety denies it
        done = subprocess.run(hook, env=env, input=json.dumps(forced), capture_output=True, text=True, check=False)
        if "deny" not in done.stdout:
            raise SystemExit(f"the script handlers did not run: {done.stdout} {done.stderr}")
        for _ in range(runs):
            times["scripts"].append(await asyncio.to_thread(timed, hook, env, json.dumps(benign)))
            times["loop"].append(await asyncio.to_thread(timed, loop, loop_env, json.dumps(benign), workspace))
        await server.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve_guard(args.serve))
        return
    with NatsServer() as server:
        proc = subprocess.Popen([sys.executable, __file__, "--serve", server.url], stdout=subprocess.PIPE, text=True)
        try:
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise SystemExit("the guard process did not start")
            asyncio.run(approve(server.url))
            state = Path(f"/tmp/hookbus-bench-{os.getpid()}")
            commands = asyncio.run(command_times(server.url, args.runs, state))
            http = asyncio.run(http_times(server.url, args.runs))
            scripts = asyncio.run(script_times(server.url, args.runs, state))
        finally:
            proc.terminate()
            proc.wait(10)
    relay, emit, own = median(commands["relay"]), median(commands["emit"]), median(commands["own"])
    post, raw = median(http["http"]), median(http["intercept"])
    rows = [
        ["claude-hook via the relay", f"{relay / emit:.2f}x hookbus emit", f"{relay / raw:.0f}x raw intercept"],
        ["claude-hook, own client", f"{own / emit:.2f}x hookbus emit", f"{own / raw:.0f}x raw intercept"],
        ["POST /hooks/claude-code", f"{post / emit:.3f}x hookbus emit", f"{post / raw:.2f}x raw intercept"],
    ]
    ten, loop = median(scripts["scripts"]), median(scripts["loop"])
    rows.append(
        ["claude-hook, 10 script handlers", f"{ten / loop:.2f}x a shell loop of the 10", f"{ten / raw:.0f}x raw"]
    )
    title = f"PreToolUse with one remote guard, median of {args.runs} runs"
    print_table(title, rows, ["path", "against a process per hook", "against the intercept itself"])


async def approve(url: str) -> None:
    """Trust the guard on first sight (the bench's own bus), so every kernel of the run calls it."""
    async with Bus(url, trust_new=True) as bus:
        await wait_for_chain(bus, "tool.call", ["benchguard.no_rm"], timeout=30)


if __name__ == "__main__":
    main()
