"""Scale curves of the workers: hooks.json size, the journal sink's store rate, fleet-metrics series.

Run from ``bench/bench_scale.py`` (``--only hooks,journal,fleet``); each curve
prints a table whose first row is 1.0 for its per-unit cost and a line saying
whether that cost grows with the work (within 2x of the first row).

- hooks: a shell-hook worker with 1 .. 1,000 hooks.json keys (one action each)
  and with one key of 1 .. 1,000 actions: the memory its configuration and
  subscriptions take per hook, and the CPU per event and per action of
  dispatching up to the process spawn (the actions are refused by the
  security rules, so everything but the spawn runs: subscription, lane, slot,
  task, result, journal entry; a spawn is bench_shell_hooks.py's business).
- journal: the sink storing (SQLite + JSONL) what a child process offers at a
  steady rate into the journal stream: stored / offered and the backlog over
  time.
- fleet: the fleet-metrics receiver counting events from 1, 100, 10,000
  sessions (an agent each) and over 1,000 subjects: series exposed (capped),
  scrape time, counting CPU per event.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import nats
import orjson
from prometheus_client import CollectorRegistry, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, rss_mib
from bus import Bus, NatsServer
from bus._core.clock import now_timestamp
from bus._journal.entries import STREAM, JournalEntry
from subscribers.fleet_metrics._fleet_series import FleetMetrics
from subscribers.fleet_metrics.receiver import FleetReceiver
from subscribers.journal.sink import JournalSink
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker

LINEAR_WITHIN = 2.0


def linear_line(name: str, first: float, last: float) -> str:
    ratio = last / first if first else float("inf")
    shape = "linear" if ratio <= LINEAR_WITHIN else "GROWS FASTER THAN THE WORK"
    return f"{name}: last row {ratio:.2f}x the first per unit of work -> {shape}"


async def _until(done: Callable[[], bool], bound: float) -> bool:
    """Poll ``done`` until it holds or ``bound`` seconds pass."""
    end = time.perf_counter() + bound
    while not done():
        if time.perf_counter() > end:
            return False
        await asyncio.sleep(0.005)
    return True


# ---------------------------------------------------------------- hooks


def _hooks_json(keys: int, actions: int) -> bytes:
    """``keys`` keys eva.custom.k<i>, ``actions`` actions each; ';' makes the security rules refuse them (no spawn)."""
    action = {"command": "/bin/true;", "timeout_ms": 1000}
    return orjson.dumps({"hooks": {f"eva.custom.k{i}": [action] * actions for i in range(keys)}})


async def hooks_row(server: NatsServer, keys: int, actions: int, events: int) -> list[float]:
    """[hooks, KiB per hook, CPU us per event, CPU us per action, events/s]."""
    with tempfile.TemporaryDirectory(prefix="hookbus-scale-hooks-") as folder:
        workspace = Path(folder)
        (workspace / "hooks.json").write_bytes(_hooks_json(keys, actions))
        async with Bus(server.url, name="scale-hooks") as bus:
            settings = WorkerSettings(queue=None, queue_size=events + 1, poll_interval_s=60)
            tracemalloc.start()
            worker = ShellWorker(bus, workspace, settings)
            await worker.start()
            memory, _ = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            try:
                if len(worker.patterns) != keys:
                    raise RuntimeError(f"worker subscribed {len(worker.patterns)} patterns, not {keys}")
                subjects = [f"eva.custom.k{i}" for i in range(keys)]
                cpu0, wall0 = time.process_time(), time.perf_counter()
                for n in range(events):
                    await bus.emit(subjects[n % keys], {"n": n})
                if not await _until(lambda: worker.stats.refusals >= events * actions, 120):
                    raise RuntimeError(f"hooks: {worker.stats} after {events} events of {actions} actions")
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            finally:
                await worker.stop()
    hooks = keys * actions
    return [hooks, memory / 1024 / hooks, cpu / events * 1e6, cpu / (events * actions) * 1e6, events / wall]


async def hooks_curve(server: NatsServer, sizes: list[int], events: int) -> None:
    for name in ("hookbus.hooks", "hookbus.shell"):  # else a refusal line per hook loaded and per run
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for label, shape in (("keys, one action each", "keys"), ("actions on one key", "actions")):
        rows = []
        for n in sizes:
            keys, actions = (n, 1) if shape == "keys" else (1, n)
            rows.append(await hooks_row(server, keys, actions, max(20, events // actions)))
        first = rows[0]
        table = [
            [
                f"{int(r[0]):,}",
                f"{r[1]:.1f} KiB",
                f"{r[1] / first[1]:.2f}",
                f"{r[2]:.0f} us",
                f"{r[3]:.0f} us",
                f"{r[3] / first[3]:.2f}",
                f"{r[4]:,.0f}/s",
            ]
            for r in rows
        ]
        print_table(
            f"hooks.json: {label} (dispatch up to the spawn; the worker and the emitter in one process)",
            table,
            ["hooks", "memory/hook", "memory/hook (x first)", "CPU/event", "CPU/action", "CPU/action (x first)",
             "events/s"],
        )  # fmt: skip
        print(linear_line(f"hooks ({label}), memory per hook", first[1], rows[-1][1]))
        print(linear_line(f"hooks ({label}), dispatch CPU per action", first[3], rows[-1][3]))


# ---------------------------------------------------------------- journal


async def journal_child(url: str, rate: float, seconds: float) -> None:
    """Publish shell_hook journal entries at ``rate`` a second for ``seconds``; print "started", then count and time."""
    nc = await nats.connect(url)
    print("started", flush=True)
    sent = 0
    begin = time.perf_counter()
    total = int(rate * seconds)
    while sent < total:
        for _ in range(max(1, int(rate / 100))):  # bites of 10 ms
            entry = JournalEntry(
                "shell_hook", "eva.custom.scale", "run", "scale-hook", "ok", duration_ms=1.0, session=f"s{sent % 100}"
            )
            await nc.publish(entry.subject(None), entry.encode())
            sent += 1
        ahead = begin + sent / rate - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)
    await nc.flush()
    print(sent, time.perf_counter() - begin, flush=True)
    await nc.close()


async def journal_row(
    bus: Bus, sink: JournalSink, url: str, rate: float, seconds: float
) -> tuple[list[float], list[tuple[float, int]]]:
    """([offered/s, stored/s while offered, stored/offered, max backlog, drain s], backlog samples)."""
    state = await bus.port.stream_state(STREAM)
    base_msgs, base_stored = (state.messages if state else 0), sink.stored
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--journal-child", url, str(rate), str(seconds),
        stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )  # fmt: skip
    assert proc.stdout is not None
    await proc.stdout.readline()  # connected: publishing from now
    samples: list[tuple[float, int]] = []
    started = time.perf_counter()
    reading = asyncio.create_task(proc.stdout.readline())
    while not reading.done():
        await asyncio.wait({reading}, timeout=0.5)
        state = await bus.port.stream_state(STREAM)
        offered = (state.messages if state else 0) - base_msgs
        samples.append((time.perf_counter() - started, offered - (sink.stored - base_stored)))
    stored_while = sink.stored - base_stored
    sent_text, offer_text = (await reading).decode().split()
    sent, offer_s = int(sent_text), float(offer_text)
    await proc.wait()
    drained = await _until(lambda: sink.stored - base_stored >= sent, 120)
    drain_s = time.perf_counter() - started - offer_s if drained else float("nan")
    backlog = max((b for _, b in samples), default=0)
    return [sent / offer_s, stored_while / offer_s, stored_while / max(sent, 1), backlog, drain_s], samples


async def journal_curve(server: NatsServer, rates: list[float], seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="hookbus-scale-journal-") as folder:
        async with Bus(server.url, name="scale-journal") as bus:
            sink = JournalSink(bus, Path(folder), durable="scale-journal")
            stop = asyncio.Event()
            task = asyncio.create_task(sink.run(stop))
            try:
                await _until(lambda: sink._stream != "", 30)  # subscribed: the stream exists
                rows = [(rate, *await journal_row(bus, sink, server.url, rate, seconds)) for rate in rates]
            finally:
                stop.set()
                await task
    first = rows[0][1]
    table = [
        [
            f"{rate:,.0f}/s",
            f"{r[0]:,.0f}/s",
            f"{r[1]:,.0f}/s",
            f"{r[2]:.3f}",
            f"{r[2] / first[2]:.2f}",
            f"{int(r[3]):,}",
            f"{r[4]:.1f} s",
            " ".join(f"{int(b)}" for _, b in samples[:: max(1, -(-len(samples) // 6))]),
        ]
        for rate, r, samples in rows
    ]
    print_table(
        f"journal sink (SQLite + JSONL) against a steady offered rate, {seconds:.0f} s each",
        table,
        ["target", "offered", "stored while offered", "stored/offered", "(x first)", "max backlog",
         "drained after", "backlog every ~1/6 of the run"],
    )  # fmt: skip
    kept = [r[0] for _, r, _ in rows if r[3] <= r[0] * 0.5]  # never more than half a second behind
    top = max(rows, key=lambda row: row[1][1])[1]
    print(
        f"journal: the sink kept up with offered rates up to {max(kept, default=0):,.0f}/s; its best store rate "
        f"here {top[1]:,.0f}/s; above it the stream holds the rest (the backlog grows with time, not faster) "
        "-> linear in entries, capped in rate"
    )


# ---------------------------------------------------------------- fleet metrics


def _fleet_events(events: int, sessions: int, subjects: int) -> list[tuple[str, bytes]]:
    """Envelopes from ``sessions`` sessions (one agent each, as source) over ``subjects`` subjects."""
    out = []
    stamp = now_timestamp()
    for n in range(events):
        subject = "prx.lifecycle.tool_call" if subjects == 1 else f"eva.custom.c{n % subjects}"
        s = n % sessions
        name = subject.removeprefix("prx.lifecycle.").removeprefix("eva.")
        body = {"event": name, "timestamp": stamp, "session_id": f"s{s}", "payload": {"tool": "shell"},
                "id": f"e{n}", "depth": 0, "source": f"agent-{s}"}  # fmt: skip
        out.append((subject, orjson.dumps(body)))
    return out


async def fleet_row(server: NatsServer, events: int, sessions: int, subjects: int) -> list[float]:
    """[sessions, subjects, events series, all series, scrape ms, scrape KiB, counted/sent, CPU us per event]."""
    messages = _fleet_events(events, sessions, subjects)
    registry = CollectorRegistry()
    fleet = FleetMetrics()
    nc = await nats.connect(server.url)
    async with Bus(server.url, name="scale-fleet") as bus:
        receiver = await FleetReceiver(bus.port, fleet, registry).start()
        try:
            cpu0 = time.process_time()
            for subject, data in messages:
                await nc.publish(subject, data)
            await nc.flush()
            await _until(lambda: fleet.events.total() >= events, 60)
            cpu = time.process_time() - cpu0
            counted = fleet.events.total()
            scrapes = []
            for _ in range(5):
                started = time.perf_counter()
                text = generate_latest(registry)
                scrapes.append(time.perf_counter() - started)
        finally:
            await receiver.stop()
            await nc.close()
    lines = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    series_events = sum(1 for line in lines if line.startswith("hookbus_fleet_events_total{"))
    scrape = sorted(scrapes)[2]
    return [sessions, subjects, series_events, len(lines), scrape * 1000, len(text) / 1024, counted / events,
            cpu / events * 1e6]  # fmt: skip


async def fleet_curve(server: NatsServer, sessions: list[int], events: int) -> None:
    shapes = [(s, 1) for s in sessions] + [(sessions[-1], 1000)]
    rows = [await fleet_row(server, events, s, n) for s, n in shapes]
    rss = rss_mib()[0]
    first = rows[0]
    table = [
        [
            f"{int(r[0]):,}",
            f"{int(r[1]):,}",
            f"{int(r[2]):,}",
            f"{int(r[3]):,}",
            f"{r[4]:.1f} ms",
            f"{r[4] / r[3] / (first[4] / first[3]):.2f}",
            f"{r[5]:.0f} KiB",
            f"{r[6]:.4f}",
            f"{r[7]:.1f} us",
            f"{r[7] / first[7]:.2f}",
        ]
        for r in rows
    ]
    print_table(
        f"fleet metrics: {events:,} events per row from N sessions (an agent each); process RSS {rss:.0f} MiB",
        table,
        ["sessions", "subjects", "event series", "all series", "scrape", "scrape/series (x first)", "scrape size",
         "counted/sent", "CPU/event (publisher + receiver)", "CPU/event (x first)"],
    )  # fmt: skip
    print(linear_line("fleet metrics, counting CPU per event", first[7], rows[-1][7]))
    print(linear_line("fleet metrics, scrape time per series", first[4] / first[3], rows[-1][4] / rows[-1][3]))
    print(f"fleet metrics, series: at most {max(int(r[3]) for r in rows):,} whatever the sessions (label caps)")


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--journal-child":
    asyncio.run(journal_child(sys.argv[2], float(sys.argv[3]), float(sys.argv[4])))
