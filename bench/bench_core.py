"""Bus core benchmark: emit and delivery against raw nats-py, memory under a flood.

    python bench/bench_core.py [--events 200000] [--rounds 5] [--user NAME]

Prints ratios (hookbus / raw nats-py, same server, same run) and RSS figures.
Each ratio is given twice: by wall-clock time, and by this process's CPU time
(what emit or delivery costs the caller, steadier on a shared, loaded machine).
With ``--user NAME`` the Bus publishes vouched as NAME
(``hookbus.from.NAME.<subject>``, docs/protocol.md#publisher-identity) and raw
nats-py publishes and subscribes on that same subject.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nats
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, rss_mib, start_up, verdict
from bus import Bus, NatsServer
from bus._core.subjects import wire_subject

SUBJECT = "prx.lifecycle.tool_call"
#: Ratios to raw nats-py the core must keep (issue #12): emit at least 0.95, delivery at least 0.85.
EMIT_TARGET = 0.95
DELIVERY_TARGET = 0.85
PAYLOAD = {"tool": "shell", "success": True, "output": "total 0\n" * 30}
#: The user the Bus publishes as (--user), None: no user, plain subjects.
USER: str | None = None


def _bus(url: str) -> Bus:
    return Bus(url, name="bench", nats_options={"inbox_prefix": f"_INBOX.{USER}"} if USER else None)


def _wire(subject: str) -> str:
    """The subject raw nats-py uses: the one hookbus sends on."""
    return wire_subject(USER, subject)


PUBLISHER = r"""
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    data = open(sys.argv[2], "rb").read()
    for _ in range(int(sys.argv[3])):
        await nc.publish(sys.argv[4], data)
    await nc.flush()
    await nc.close()
asyncio.run(main())
"""


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clocks()
    return wall - start[0], cpu - start[1]


async def emit_round(url: str, events: int, bus_first: bool) -> tuple[tuple[float, float], tuple[float, float]]:
    """(wall, CPU) seconds for `events` raw publishes of the encoded bytes and for `events` emits.

    Rounds alternate which goes first: the second runs while the server still
    digests the first's burst, which would otherwise always handicap one side.
    """
    async with _bus(url) as bus:
        raw = await nats.connect(url)
        data, _ = bus._encoder.encode(SUBJECT, PAYLOAD, "s1", 0)

        async def raw_loop() -> tuple[float, float]:
            start = _clocks()
            for _ in range(events):
                await raw.publish(_wire(SUBJECT), data)
            await raw.flush()
            return _since(start)

        async def bus_loop() -> tuple[float, float]:
            start = _clocks()
            for _ in range(events):
                await bus.emit(SUBJECT, PAYLOAD, session_id="s1")
            await bus.flush()
            return _since(start)

        if bus_first:
            bus_s = await bus_loop()
            raw_s = await raw_loop()
        else:
            raw_s = await raw_loop()
            bus_s = await bus_loop()
        await raw.close()
    return raw_s, bus_s


async def _publish_from_child(url: str, datafile: Path, events: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", PUBLISHER, url, str(datafile), str(events), _wire(SUBJECT)
    )


async def deliver_round(url: str, events: int, datafile: Path, kind: str) -> tuple[float, float]:
    """Events per (wall, CPU) second received by one subscriber while a child process floods it."""
    got = 0
    first = (0.0, 0.0)
    done = asyncio.Event()

    def count() -> None:
        nonlocal got, first
        got += 1
        if got == 1:
            first = _clocks()
        if got == events:
            done.set()

    if kind == "raw":
        nc = await nats.connect(url)

        async def cb(msg: nats.aio.msg.Msg) -> None:
            orjson.loads(msg.data)
            count()

        await nc.subscribe(_wire("prx.lifecycle.*"), cb=cb, pending_msgs_limit=events)
        await nc.flush()
        closer = nc.close
    else:
        bus = await _bus(url).start()
        await bus.subscribe("prx.lifecycle.*", lambda event: count(), pending_msgs=events)
        await bus.flush()
        closer = bus.close
    child = await _publish_from_child(url, datafile, events)
    try:
        await asyncio.wait_for(done.wait(), 120)
    finally:
        wall, cpu = _since(first)
        await child.wait()
        await closer()
    return (got - 1) / wall, (got - 1) / cpu


FLOOD_SUBSCRIBER = r"""
import asyncio, sys, time
sys.path.insert(0, sys.argv[3])
from bus import Bus
from bench.common import rss_mib
async def main():
    async with Bus(sys.argv[1]) as bus:
        async def slow(event):
            await asyncio.sleep(0.002)
        await bus.subscribe("prx.lifecycle.*", slow, pending_msgs=int(sys.argv[2]))
        await bus.flush()
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        s = bus.stats
        last = -1
        while last != sum(s.delivered.values()) + s.dropped["slow_consumer"]:  # until it settles
            last = sum(s.delivered.values()) + s.dropped["slow_consumer"]
            await asyncio.sleep(1.0)
        print(f"{rss_mib()[1]:.1f} {sum(s.delivered.values())} {s.dropped['slow_consumer']}", flush=True)
asyncio.run(main())
"""


async def flood_memory(url: str, events: int, datafile: Path, pending: int) -> tuple[float, int, int]:
    """Peak RSS (MiB), delivered and dropped counts of a slow subscriber flooded with `events`."""
    root = str(Path(__file__).resolve().parent.parent)
    sub = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FLOOD_SUBSCRIBER,
        url,
        str(pending),
        root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert sub.stdout is not None
    assert sub.stdin is not None
    await sub.stdout.readline()
    child = await _publish_from_child(url, datafile, events)
    await child.wait()
    sub.stdin.write(b"go\n")
    await sub.stdin.drain()
    line = (await sub.stdout.readline()).decode().split()
    await sub.wait()
    return float(line[0]), int(line[1]), int(line[2])


def server_slow_consumer_cuts(server: NatsServer) -> int:
    """Times nats-server cut a client off as a slow consumer (its /varz); what it held is lost."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/varz", timeout=5) as reply:
        return int(orjson.loads(reply.read()).get("slow_consumers", 0))


def idle_up_rss() -> float:
    """RSS (MiB) of an idle `hookbus up`, its nats-server excluded."""
    proc, _ = start_up("--workspace", "/tmp/hookbus-bench-ws", "--port", "0", "--metrics-port", "0")
    try:
        time.sleep(1.0)
        return rss_mib(proc.pid)[0]
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--user", help="publish vouched as this NATS user (hookbus.from.<user>.<subject>)")
    args = parser.parse_args()
    global USER
    USER = args.user
    with NatsServer(http_port=0) as server:
        async with Bus(server.url) as probe:
            data, _ = probe._encoder.encode(SUBJECT, PAYLOAD, "s1", 0)
        datafile = Path(server._own_dir) / "event.json"
        datafile.write_bytes(data)

        emit_ratios, emit_cpu_ratios, raw_rates, bus_rates = [], [], [], []
        for round_no in range(args.rounds):
            raw_s, bus_s = await emit_round(server.url, args.events, bus_first=round_no % 2 == 1)
            emit_ratios.append(raw_s[0] / bus_s[0])
            emit_cpu_ratios.append(raw_s[1] / bus_s[1])
            raw_rates.append(args.events / raw_s[0])
            bus_rates.append(args.events / bus_s[0])

        deliver = args.events // 2
        d_ratios, d_cpu_ratios, d_raw, d_bus = [], [], [], []
        for round_no in range(args.rounds):
            kinds = ("bus", "raw") if round_no % 2 else ("raw", "bus")  # alternate, as for emit
            rates = {kind: await deliver_round(server.url, deliver, datafile, kind) for kind in kinds}
            raw_rate, bus_rate = rates["raw"], rates["bus"]
            d_ratios.append(bus_rate[0] / raw_rate[0])
            d_cpu_ratios.append(bus_rate[1] / raw_rate[1])
            d_raw.append(raw_rate[0])
            d_bus.append(bus_rate[0])

        peak, delivered, dropped = await flood_memory(server.url, 100_000, datafile, pending=20_000)
        server_cuts = await asyncio.to_thread(server_slow_consumer_cuts, server)
    idle = idle_up_rss()

    rows = [
        [
            "emit vs raw nc.publish (same bytes, no headers)",
            f"{median(raw_rates):,.0f}/s",
            f"{median(bus_rates):,.0f}/s",
            f"{median(emit_ratios):.2f}",
            verdict(median(emit_ratios), EMIT_TARGET),
            f"{median(emit_cpu_ratios):.2f}",
            verdict(median(emit_cpu_ratios), EMIT_TARGET),
        ],
        [
            "delivery via subscribe vs raw callback + orjson.loads",
            f"{median(d_raw):,.0f}/s",
            f"{median(d_bus):,.0f}/s",
            f"{median(d_ratios):.2f}",
            verdict(median(d_ratios), DELIVERY_TARGET),
            f"{median(d_cpu_ratios):.2f}",
            verdict(median(d_cpu_ratios), DELIVERY_TARGET),
        ],
    ]
    print(f"events {len(data)} B each; {args.rounds} rounds; medians; ratio = hookbus / raw (higher is better)")
    print_table(
        "throughput (rates by wall clock)",
        rows,
        ["what", "raw nats-py", "hookbus", "ratio (wall)", "target", "ratio (CPU)", "target"],
    )
    print_table(
        "memory",
        [
            [
                "slow subscriber (2 ms/event, 64 in flight, 20k pending) flooded with 100k events",
                f"peak RSS {peak:.1f} MiB",
                f"delivered {delivered:,}, dropped as slow consumer {dropped:,}",
                f"{100_000 - delivered - dropped:,} lost at nats-server ({server_cuts} slow-consumer cut-offs)",
            ],
            ["idle `hookbus up` (nats-server excluded)", f"RSS {idle:.1f} MiB", "", ""],
        ],
        ["what", "memory", "events", "accounting"],
    )


if __name__ == "__main__":
    asyncio.run(main())
