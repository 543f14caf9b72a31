"""Claim-check benchmark: a 1 MiB payload emit -> hook (whole) against a 60 KiB one, in the same run.

    python bench/bench_claim_check.py [--events 20] [--rounds 3]

Both go through a real ShellWorker whose hook reads its payload file and stdin
(``cat``); the 60 KiB event fits the 64 KiB limit and travels as it is, the
1 MiB one is stored whole in the ``hookbus_payloads`` object store, its
envelope carries a reference and a preview, and the worker fetches and checks
it before the hook starts. Also: emit -> Python subscriber's
``await event.full_payload()``, 1 MiB against 60 KiB. The ratio is time per
event, 1 MiB over 60 KiB (lower is better; a 17x larger payload).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table
from bus import Bus, Event, NatsServer
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker

SUBJECT = "prx.lifecycle.tool_call"
HOOK = '#!/bin/sh\ncat "$ZERO_HOOK_PAYLOAD_FILE" > /dev/null\ncat > /dev/null\n'


def payload(size: int) -> dict[str, Any]:
    return {"tool": "shell", "success": True, "output": "x" * size}


async def through_hook(bus: Bus, workspace: Path, size: int, events: int) -> float:
    """Seconds per event from emit to a finished hook that read the whole payload twice (file, stdin)."""
    worker = ShellWorker(bus, workspace, WorkerSettings(queue=None, max_procs=4, queue_size=events + 1))
    await worker.start()
    body = payload(size)
    try:
        start = time.perf_counter()
        for _ in range(events):
            await bus.emit(SUBJECT, body)
        while worker.stats.runs + worker.stats.shed < events:
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - start
        assert worker.stats.shed == 0, worker.stats
        assert worker.stats.failures == 0, worker.stats
        return elapsed / events
    finally:
        await worker.stop()


async def through_subscriber(bus: Bus, size: int, events: int) -> float:
    """Seconds per event from emit to a subscriber holding the whole payload."""
    done = asyncio.Event()
    seen = 0
    body = payload(size)

    async def whole(event: Event) -> None:
        nonlocal seen
        got = await event.full_payload()
        assert len(got["output"]) == size
        seen += 1
        if seen == events:
            done.set()

    sub = await bus.subscribe(SUBJECT, whole)
    try:
        start = time.perf_counter()
        for _ in range(events):
            await bus.emit(SUBJECT, body)
        await asyncio.wait_for(done.wait(), 120)
        return (time.perf_counter() - start) / events
    finally:
        await sub.unsubscribe()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    small, large = 60 * 1024, 1024 * 1024
    with NatsServer() as server, tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        hook = workspace / "read.sh"
        hook.write_text(HOOK)
        hook.chmod(0o755)
        hooks = {"hooks": {"tool_call": [{"command": "./read.sh", "stdin_json": True}]}}
        (workspace / "hooks.json").write_bytes(orjson.dumps(hooks))
        async with Bus(server.url, name="bench") as bus:
            await bus.port.ensure_payloads_bucket()
            hook_ratios, sub_ratios, hook_times, sub_times = [], [], [], []
            for _ in range(args.rounds):
                base = await through_hook(bus, workspace, small, args.events)
                claimed = await through_hook(bus, workspace, large, args.events)
                hook_ratios.append(claimed / base)
                hook_times.append((base, claimed))
                base = await through_subscriber(bus, small, args.events)
                claimed = await through_subscriber(bus, large, args.events)
                sub_ratios.append(claimed / base)
                sub_times.append((base, claimed))
            assert bus.stats.claimed == 2 * args.rounds * args.events, bus.stats.claimed
    rows = [
        ["emit -> shell hook (file + stdin)", _ms(hook_times, 0), _ms(hook_times, 1), f"{median(hook_ratios):.2f}"],
        ["emit -> subscriber full_payload()", _ms(sub_times, 0), _ms(sub_times, 1), f"{median(sub_ratios):.2f}"],
    ]
    print_table(
        f"claim check: 1 MiB (object store) vs 60 KiB (inline), {args.events} events x {args.rounds} rounds",
        rows,
        ["path", "60 KiB per event", "1 MiB per event", "ratio 1 MiB / 60 KiB"],
    )


def _ms(times: list[tuple[float, float]], which: int) -> str:
    return f"{median([pair[which] for pair in times]) * 1000:.2f} ms"


if __name__ == "__main__":
    asyncio.run(main())
