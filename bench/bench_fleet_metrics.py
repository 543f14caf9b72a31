"""Fleet-metrics benchmark: `hookbus up` counting a 100k-event flood sent at the raw delivery rate.

    python bench/bench_fleet_metrics.py [--events 100000] [--rounds 1]

Baseline, in the same run on the same server: the rate at which one raw
nats-py subscriber (JSON decode per message) receives a flood from a child
process publishing as fast as it can. Then a child publishes the same number
of events (the envelope bytes `emit` sends, on prx.lifecycle.tool_call) paced
at that rate while `hookbus up` runs with its workers; the events its
/metrics counts (``hookbus_fleet_events_total``), divided by the events sent,
is the figure (target >= 0.99), with how long counting lagged behind the
flood and the RSS of the `hookbus up` process before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import nats
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, rss_mib, start_up, verdict
from bus import NatsServer
from bus._core.encoder import Encoder

SUBJECT = "prx.lifecycle.tool_call"
PAYLOAD = {"tool": "shell", "success": True, "output": "total 0\n" * 30}
TARGET = 0.99

#: argv: url, data file, events, subject, rate (0: as fast as possible)
PUBLISHER = r"""
import asyncio, sys, time, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    data = open(sys.argv[2], "rb").read()
    events, subject, rate = int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    start = time.perf_counter()
    for i in range(events):
        await nc.publish(subject, data)
        if rate and i % 200 == 199:
            ahead = start + (i + 1) / rate - time.perf_counter()
            if ahead > 0:
                await nc.flush()
                await asyncio.sleep(ahead)
    await nc.flush()
    print(f"{time.perf_counter() - start:.6f}", flush=True)
    await nc.close()
asyncio.run(main())
"""


async def publish(url: str, datafile: Path, events: int, rate: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PUBLISHER,
        url,
        str(datafile),
        str(events),
        SUBJECT,
        str(rate),
        stdout=asyncio.subprocess.PIPE,
    )


async def raw_delivery_rate(url: str, datafile: Path, events: int) -> float:
    """Events per second one raw nats-py subscriber (orjson.loads each) receives from a full-speed flood."""
    got = 0
    first = 0.0
    done = asyncio.Event()
    nc = await nats.connect(url)

    async def cb(msg: Any) -> None:
        nonlocal got, first
        orjson.loads(msg.data)
        got += 1
        if got == 1:
            first = time.perf_counter()
        if got == events:
            done.set()

    await nc.subscribe(SUBJECT, cb=cb, pending_msgs_limit=events)
    await nc.flush()
    child = await publish(url, datafile, events, 0)
    try:
        await asyncio.wait_for(done.wait(), 120)
    finally:
        elapsed = time.perf_counter() - first
        await child.communicate()
        await nc.close()
    return (got - 1) / elapsed


def counted(metrics_url: str) -> float:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    pattern = re.compile(r"^hookbus_fleet_events_total\{([^}]*)\} (\S+)$", re.M)
    return sum(float(value) for labels, value in pattern.findall(text) if f'subject="{SUBJECT}"' in labels)


class Up:
    """`hookbus up` on an existing server, in a child process."""

    def __init__(self, url: str, workspace: Path) -> None:
        self.proc, text = start_up(
            "--workspace", str(workspace), "--nats-url", url, "--metrics-port", "0", "--http-port", "0", quiet=True
        )
        found = re.search(r"metrics\s+(http://\S+)", text)
        if not found:
            raise RuntimeError(f"hookbus up did not start: {text}")
        self.metrics_url = found.group(1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=30)


async def flood_round(
    url: str, datafile: Path, events: int, rate: float
) -> tuple[float, float, float, float, float, float]:
    """(counted / sent, sent rate, counting rate, seconds counting lagged after the flood, RSS before, peak RSS)."""
    with tempfile.TemporaryDirectory(prefix="hookbus-bench-fleet-") as folder:
        up = Up(url, Path(folder) / "ws")
        try:
            rss_before, _ = rss_mib(up.proc.pid)
            base = counted(up.metrics_url)
            child = await publish(url, datafile, events, rate)
            out, _ = await child.communicate()
            sent_s = float(out.decode().strip())
            flood_end = time.perf_counter()
            last, stable_since = -1.0, time.perf_counter()
            while time.perf_counter() - stable_since < 2.0:  # until the count stops moving for 2 s
                now = counted(up.metrics_url) - base
                if now != last:
                    last, stable_since = now, time.perf_counter()
                    if now >= events:
                        break
                await asyncio.sleep(0.1)
            lag = max(stable_since - flood_end, 0.0)
            _, rss_peak = rss_mib(up.proc.pid)
            text = urllib.request.urlopen(up.metrics_url, timeout=10).read().decode()
            # A receiver that falls too far behind is cut by the server as a slow consumer: what was buffered is lost.
            cut = [
                line
                for line in text.splitlines()
                if line.startswith(("hookbus_events_dropped_total", "hookbus_nats_", "hookbus_fleet_receiver_"))
            ]
            print("hookbus up after the flood:", "; ".join(cut), file=sys.stderr)
        finally:
            up.stop()
    return last / events, events / sent_s, last / (sent_s + lag), lag, rss_before, rss_peak


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    server = NatsServer(jetstream=True)
    server.start()
    try:
        data, _ = Encoder().encode(SUBJECT, PAYLOAD, "s1", 0)
        with tempfile.NamedTemporaryFile(suffix=".json") as datafile:
            Path(datafile.name).write_bytes(data)
            rows = []
            for round_no in range(args.rounds):
                raw_rate = await raw_delivery_rate(server.url, Path(datafile.name), args.events)
                ratio, sent_rate, count_rate, lag, before, peak = await flood_round(
                    server.url, Path(datafile.name), args.events, raw_rate
                )
                rows.append(
                    (
                        str(round_no + 1),
                        f"{sent_rate / raw_rate:.2f}",
                        f"{ratio:.4f}",
                        verdict(ratio, TARGET),
                        f"{count_rate / raw_rate:.2f}",
                        f"{lag:.1f}",
                        f"{before:.0f} -> {peak:.0f}",
                    )
                )
        print_table(
            f"hookbus up counting {args.events} events ({len(data)} B) sent at the raw delivery rate",
            rows,
            (
                "round",
                "sent rate / raw delivery rate",
                "counted / sent",
                "target",
                "counting rate / raw delivery rate",
                "lag after flood (s)",
                "RSS MiB",
            ),
        )
    finally:
        server.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
