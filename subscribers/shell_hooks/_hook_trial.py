"""Run the hooks an event would trigger, once, locally, and report what each did.

In the spirit of agent_os's hook_tool: try a hook without an agent or a bus.
The event is built with the bus's own envelope codec, so the hook sees exactly
what it will see in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from bus._core.claim import DEFAULT_MAX_OBJECT_BYTES
from bus._core.depth import depth_from_env
from bus._core.encoder import Encoder
from bus._core.envelope import Event, decode_event
from bus._runtime.visible import visible_lines
from bus._sandbox.outcome import HookOutcome
from subscribers.shell_hooks._hooks_config import HookEntry
from subscribers.shell_hooks._hooks_file import HOOKS_FILE, load
from subscribers.shell_hooks._shell import HookResult, ShellRunner

#: A local run (no bus) passes payloads whole up to the claim-check cap, as a hook gets them from the bus
#: when the object store holds the payload; the bus's own message limit does not apply here.
LOCAL_MAX_BYTES: Final = DEFAULT_MAX_OBJECT_BYTES + 64 * 1024


def make_event(subject: str, payload: Mapping[str, Any], session_id: str | None) -> Event:
    """An event on ``subject`` as a subscriber would receive it (depth from ``$HOOKBUS_DEPTH``), whole up to 4 MiB."""
    encoder = Encoder(LOCAL_MAX_BYTES, source="hookbus-hooks-test")
    data, _ = encoder.encode(subject, payload, session_id, depth_from_env())
    return decode_event(subject, data, max_bytes=LOCAL_MAX_BYTES)


async def run_matching(workspace: Path, event: Event, runner: ShellRunner) -> list[tuple[HookEntry, HookResult]]:
    """Run every enabled hook of the workspace that matches the event, concurrently."""
    config = load(workspace / HOOKS_FILE)
    runner.default_isolation = config.isolation
    entries = config.matching(event.subject)
    results = await asyncio.gather(*(runner.run(entry, event) for entry in entries))
    return list(zip(entries, results, strict=True))


def describe(entry: HookEntry, result: HookResult) -> str:
    """A human report of one run: outcome line, then the output indented."""
    head = f"hook {result.hook_id} ({result.event}) {entry.action.command}: {result.outcome.value}"
    if result.outcome is HookOutcome.REFUSED:
        return f"{head}: {result.reason}"
    if result.exit_code is not None:
        head += f", exit {result.exit_code}"
    head += f" in {result.duration * 1000:.0f} ms"
    if result.reason and not result.reason.startswith("exit code"):
        head += f" ({result.reason})"
    lines = [head]
    for stream, data, total in (
        ("stdout", result.stdout, result.stdout_bytes),
        ("stderr", result.stderr, result.stderr_bytes),
    ):
        if total > len(data):
            lines.append(f"  {stream} | [... {total - len(data)} earlier bytes not kept]")
        lines.extend(f"  {stream} | {line}" for line in visible_lines(data.decode(errors="replace")))
    return "\n".join(lines)
