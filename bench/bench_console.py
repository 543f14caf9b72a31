"""Console live view benchmark: does the live stream of ``hookbus up`` keep up with 1,000 events a second?

    python bench/bench_console.py [--seconds 5] [--rate 1000] [--flood 20000]

Runs a real ``hookbus up``, opens its live stream (server-sent events, as the
page does) and a plain subscriber in this process as the baseline, then emits
at ``--rate`` events a second for ``--seconds``, and a flood of ``--flood``
events as fast as one publisher can. Prints, as ratios against the baseline
measured in the same run: how fast the stream accounts for the events
(shown plus counted as sampled out) against the subscriber receiving them,
and the CPU ``hookbus up`` spends on a paced run with one viewer against the
same run with none. The stream keeps up when every event is accounted for and
the rate ratio stays near 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, start_up, verdict
from bus import Bus, Event

SUBJECT = "prx.lifecycle.tool_call"
PAYLOAD = {"tool": "shell", "success": True, "output": "total 0\n" * 10}
#: The live stream keeps up if it accounts for events at least this fast, as a ratio to a plain subscriber.
KEEP_UP_TARGET = 0.95
TICK_S = 0.01


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Up:
    """``hookbus up`` in a temporary workspace, with the URLs it printed."""

    def __init__(self, workspace: Path) -> None:
        self.proc, text = start_up(
            "--workspace", str(workspace), "--port", "0", "--http-port", "0", "--metrics-port", "-1"
        )
        self.nats_url = re.search(r"nats\s+(nats://\S+)", text).group(1)  # type: ignore[union-attr]
        self.base = re.search(r"console\s+(http://\S+)/console/", text).group(1)  # type: ignore[union-attr]
        self.token = (workspace / "api-token").read_text().strip()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Stream:
    """The live stream as the page reads it: counts shown and sampled-out events."""

    def __init__(self) -> None:
        self.shown = 0
        self.skipped = 0

    @property
    def accounted(self) -> int:
        return self.shown + self.skipped

    async def read(self, response: aiohttp.ClientResponse) -> None:
        name = ""
        async for line in response.content:
            if line.startswith(b"event: "):
                name = line[7:].strip().decode()
            elif line.startswith(b"data: "):
                data = orjson.loads(line[6:])
                if name == "events":
                    self.shown += len(data)
                elif name == "sampled":
                    self.skipped += data["skipped"]


async def emit_paced(bus: Bus, total: int, rate: int) -> None:
    per_tick = max(1, round(rate * TICK_S))
    start = time.perf_counter()
    sent = 0
    while sent < total:
        for _ in range(min(per_tick, total - sent)):
            await bus.emit(SUBJECT, PAYLOAD)
            sent += 1
        await bus.flush()
        ahead = start + sent / rate - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)


async def until(condition: object, timeout: float = 60.0) -> float:
    """perf_counter() once ``condition()`` holds (polled every millisecond)."""
    deadline = time.perf_counter() + timeout
    while not condition():  # type: ignore[operator]
        if time.perf_counter() > deadline:
            raise TimeoutError("the events did not all arrive")
        await asyncio.sleep(0.001)
    return time.perf_counter()


async def run_once(up: Up, total: int, rate: int | None, viewer: bool) -> tuple[float, float, float, Stream]:
    """(baseline seconds, stream seconds, hookbus up CPU seconds, stream counts) for one run."""
    received = 0

    async def count(_: Event) -> None:
        nonlocal received
        received += 1

    stream = Stream()
    async with aiohttp.ClientSession() as session, Bus(up.nats_url) as listener, Bus(up.nats_url) as publisher:
        await listener.subscribe(SUBJECT, count)
        await listener.flush()
        reader, response = None, None
        if viewer:
            headers = {"Authorization": f"Bearer {up.token}"}
            response = await session.get(f"{up.base}/api/live?pattern={SUBJECT}", headers=headers)
            reader = asyncio.create_task(stream.read(response))
            await until(lambda: response.content.total_bytes > 0)  # the hello: the viewer has joined
        cpu0, start = cpu_s(up.proc.pid), time.perf_counter()
        if rate is None:
            for _ in range(total):
                await publisher.emit(SUBJECT, PAYLOAD)
            await publisher.flush()
        else:
            await emit_paced(publisher, total, rate)
        baseline_done = await until(lambda: received >= total)
        stream_done = await until(lambda: stream.accounted >= total) if viewer else baseline_done
        cpu = cpu_s(up.proc.pid) - cpu0
        if reader is not None and response is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            response.close()
    return baseline_done - start, stream_done - start, cpu, stream


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="hookbus-bench-console-") as folder:
        up = Up(Path(folder))
        try:
            total = args.seconds * args.rate
            _, _, idle_cpu, _ = await run_once(up, total, args.rate, viewer=False)
            base, live, cpu, paced = await run_once(up, total, args.rate, viewer=True)
            flood_base, flood_live, _, flood = await run_once(up, args.flood, None, viewer=True)
        finally:
            up.close()
    paced_ratio, flood_ratio = base / live, flood_base / flood_live
    rows = [
        [
            f"{args.rate}/s for {args.seconds}s",
            f"{paced.accounted}/{total}",
            f"{paced.shown / total:.2f}",
            f"{paced_ratio:.2f}",
            verdict(paced_ratio, KEEP_UP_TARGET),
        ],
        [
            f"flood of {args.flood}",
            f"{flood.accounted}/{args.flood}",
            f"{flood.shown / args.flood:.2f}",
            f"{flood_ratio:.2f}",
            "(sampled)",
        ],
    ]
    header = ["run", "accounted", "shown share", "stream rate / subscriber rate", "keeps up"]
    print_table("live stream of hookbus up against a plain subscriber (same run)", rows, header)
    print(f"\nhookbus up CPU, paced run with one viewer / with none: {cpu / idle_cpu:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--flood", type=int, default=20000)
    asyncio.run(main(parser.parse_args()))
