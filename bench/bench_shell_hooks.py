"""Shell-hook benchmark: hook start overhead against a bare spawn loop, memory under a flood.

    python bench/bench_shell_hooks.py [--events 500] [--procs 4] [--rounds 3] [--flood 2000]

Start overhead: events/s through a real ShellWorker whose only hook is
/bin/true, against a bare asyncio loop spawning /bin/true with the same
concurrency bound, in the same run (target ratio >= 0.8). Flood: peak RSS of
this process while a worker takes 2,000 events at once, with its accounting.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, rss_mib, verdict
from bus import Bus, NatsServer
from bus._sandbox.process import spawn
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker

SUBJECT = "prx.lifecycle.tool_call"
PAYLOAD = {"tool": "shell", "success": True, "output": "ok"}


async def bare_loop(events: int, procs: int) -> float:
    """Spawns of /bin/true per second, ``procs`` at a time, nothing else."""
    slots = asyncio.Semaphore(procs)

    async def one() -> None:
        async with slots:
            proc = await asyncio.create_subprocess_exec(
                "/bin/true", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL
            )
            await proc.wait()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(events)))
    return events / (time.perf_counter() - start)


async def bare_pidfd_loop(events: int, procs: int, workspace: Path) -> float:
    """The same bare loop on the worker's own spawn primitive (pidfd, no thread per child)."""
    slots = asyncio.Semaphore(procs)

    async def one() -> None:
        async with slots:
            proc = spawn(["/bin/true"], env={}, cwd=workspace, stdin_data=None, output_limit=4096)
            await proc.wait()
            proc.close()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(events)))
    return events / (time.perf_counter() - start)


async def through_worker(bus: Bus, workspace: Path, events: int, procs: int) -> float:
    """Events per second from emit to a finished /bin/true hook, through a ShellWorker."""
    worker = ShellWorker(bus, workspace, WorkerSettings(queue=None, max_procs=procs, queue_size=events + 1))
    await worker.start()
    try:
        start = time.perf_counter()
        for _ in range(events):
            await bus.emit(SUBJECT, PAYLOAD)
        while worker.stats.runs + worker.stats.shed < events:
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - start
        assert worker.stats.shed == 0, worker.stats
        assert worker.stats.failures == 0, worker.stats
        return events / elapsed
    finally:
        await worker.stop()


class PeakRss:
    """Samples this process's RSS every 5 ms in a thread; keeps the peak."""

    def __init__(self) -> None:
        self.peak = rss_mib()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_mib()[0])

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def flood(bus: Bus, workspace: Path, events: int) -> list[str]:
    """RSS before and at peak while a worker (4 procs, queue 1000) takes ``events`` at once."""
    worker = ShellWorker(bus, workspace, WorkerSettings(queue=None, max_procs=4, queue_size=1000))
    await worker.start()
    before = rss_mib()[0]
    try:
        with PeakRss() as sampler:
            for _ in range(events):
                await bus.emit(SUBJECT, PAYLOAD)
            while worker.stats.runs + worker.stats.shed < events:
                await asyncio.sleep(0.005)
    finally:
        await worker.stop()
    s = worker.stats
    return [
        f"{events:,} events, 4 procs, queue 1000",
        f"{before:.1f} MiB -> peak {sampler.peak:.1f} MiB (+{sampler.peak - before:.1f})",
        f"runs {s.runs:,} + shed {s.shed:,} = {s.runs + s.shed:,} of {s.received:,} received",
        f"{s.running_peak} (bound 4)",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flood", type=int, default=2000)
    args = parser.parse_args()
    with NatsServer() as server, tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        (workspace / "hooks.json").write_bytes(orjson.dumps({"hooks": {"tool_call": [{"command": "/bin/true"}]}}))
        async with Bus(server.url, name="bench") as bus:
            bare, pidfd, hooked = [], [], []
            for _ in range(args.rounds):
                bare.append(await bare_loop(args.events, args.procs))
                pidfd.append(await bare_pidfd_loop(args.events, args.procs, workspace))
                hooked.append(await through_worker(bus, workspace, args.events, args.procs))
            vs_asyncio = median([w / b for w, b in zip(hooked, bare, strict=True)])
            vs_pidfd = median([w / b for w, b in zip(hooked, pidfd, strict=True)])
            w = f"{median(hooked):,.0f}/s"
            print_table(
                f"hook start overhead ({args.events} events x {args.rounds} rounds, {args.procs} at a time, /bin/true)",
                [
                    ["worker vs bare asyncio subprocess loop (target)", f"{median(bare):,.0f}/s", w,
                     f"{vs_asyncio:.2f}", verdict(vs_asyncio, 0.8)],
                    ["worker vs bare loop on the same pidfd spawn", f"{median(pidfd):,.0f}/s", w,
                     f"{vs_pidfd:.2f}", "the worker's own cost"],
                ],
                ["what", "baseline", "through worker", "ratio", "verdict"],
            )  # fmt: skip
            flooded = await flood(bus, workspace, args.flood)
            print_table("worker memory under a flood", [flooded], ["flood", "RSS", "accounting", "peak procs"])


if __name__ == "__main__":
    asyncio.run(main())
