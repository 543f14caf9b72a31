"""Audit benchmark: the journal sink's store rate with the hash chain and signed checkpoints against without,
and ``hookbus journal verify``'s entries per second, in the same run.

    python bench/bench_audit.py [--entries 20000] [--rounds 6] [--sink-entries 10000]

Each round stores the same entries, in the sink's batches of 500, into a fresh
``journal.db`` and its JSONL files twice: once as the sink does (each row
linked into its kind's chain, a checkpoint signed every 1,000 entries per kind
and when it stops), once unchained (``JournalStore.insert_many`` without
chains, no checkpoints: what the sink stored before the chain). Rounds
alternate which goes first, so load on the machine hits both alike. This is
the store step alone, the strict measure. Then the whole sink, end to end:
entries published once into the stream on a real server, and each round a
new ``JournalSink`` (its own workspace and durable consumer) fetches,
decodes, stores and acknowledges them all, chained or not (``chained=False``,
the bench's baseline only).

``verify`` checks the chained journal of the last round (the same function
``hookbus journal verify`` runs), from ``journal.db`` and from the JSONL
files, against just reading the same rows (the baseline). Prints ratios:
chained / unchained store rate (target >= 0.9), in wall and in CPU time, and verify entries/s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nats
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus import Bus, NatsServer
from bus._core.clock import timestamp_ms
from bus._journal.entries import STREAM, JournalEntry, ensure_journal_stream
from subscribers.journal._chain import Chains
from subscribers.journal._checkpoints import Checkpointer, JournalKey
from subscribers.journal._store import CHECKPOINTS_JSONL, DB_NAME, JSONL_DIR, JournalStore, JsonlWriter, Received
from subscribers.journal._verify import verify
from subscribers.journal.sink import JournalSink

BATCH = 500  # subscribers.journal.sink.BATCH
_BASE_MS = 1_796_000_000_000
KINDS = ("middleware", "middleware", "middleware", "subscriber")  # mostly decisions, some reactions


def make_rows(count: int) -> list[Received]:
    """Entries such as the sink stores: a middleware decision names its handler, identity, cause, latency, trace."""
    rows = []
    for i in range(count):
        entry = JournalEntry(
            kind=KINDS[i % len(KINDS)],
            point="tool.call",
            phase="request",
            who=f"guard.h{i % 5}",
            decision="cancel" if i % 7 == 0 else "continue",
            cause="rm -rf outside the workspace" if i % 7 == 0 else None,
            duration_ms=0.4 + (i % 13) / 10,
            session=f"s{i % 40}",
            agent="claude-code",
            trace_id=f"{i:032x}",
            identity=f"{i % 5:064x}",
            time=timestamp_ms(_BASE_MS + i),
        )
        rows.append(
            Received(
                entry,
                stream_seq=i + 1,
                received=timestamp_ms(_BASE_MS + i + 1),
                stream="2026-12-02T00:00:00Z",
                origin="kernel",
            )
        )
    return rows


def store_round(workspace: Path, rows: list[Received], chained: bool) -> tuple[float, float]:
    """Store ``rows`` as the sink does (chained: linked and signed): entries per second of wall time and of CPU
    time (the process's: on a loaded machine the wall time also counts others' work, the CPU time does not)."""
    store = JournalStore(workspace / DB_NAME)
    jsonl = JsonlWriter(workspace / JSONL_DIR)
    chains = Chains(store.heads()) if chained else None
    checkpointer = Checkpointer(JournalKey.of_workspace(workspace), "bench", {}) if chained else None

    def checkpoint(final: bool = False) -> None:
        if chains is None or checkpointer is None:
            return
        made = checkpointer.due(chains, final)
        for cp in made:
            store.add_checkpoint(cp)
        if made:
            jsonl.write_checkpoints(made)

    try:
        started, cpu = time.perf_counter(), time.process_time()
        for start in range(0, len(rows), BATCH):
            checkpoint()
            fresh, refused = store.insert_many(rows[start : start + BATCH], chains)
            assert not refused, refused
            assert len(fresh) == min(BATCH, len(rows) - start)
            jsonl.write(fresh)
        checkpoint(final=True)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        store.close()
    return len(rows) / elapsed, len(rows) / cpu


def timed_rate(count: int, work: Callable[[], int]) -> float:
    started = time.perf_counter()
    seen = work()
    elapsed = time.perf_counter() - started
    assert seen == count, (seen, count)
    return count / elapsed


def verify_rates(workspace: Path, count: int) -> dict[str, float]:
    """Entries/s: reading journal.db's rows, verifying them; reading the JSONL lines, verifying them."""
    key = JournalKey.of_workspace(workspace).public_key
    store = JournalStore(workspace / DB_NAME)
    files = sorted((workspace / JSONL_DIR).glob("*.jsonl"))
    checkpoints = [orjson.loads(line) for line in (workspace / CHECKPOINTS_JSONL).read_bytes().splitlines()]

    def read_db() -> int:
        return sum(1 for _ in store.chained())

    def verify_db() -> int:
        report = verify(store.chained(), store.checkpoints(), key)
        assert report.ok, report
        assert not report.unsigned, report
        return report.entries

    def lines() -> list[dict[str, object]]:
        return [orjson.loads(line) for path in files for line in path.read_bytes().splitlines()]

    def read_jsonl() -> int:
        return len(lines())

    def verify_jsonl() -> int:
        report = verify(lines(), checkpoints, key)
        assert report.ok, report
        assert not report.unsigned, report
        return report.entries

    try:
        rates: dict[str, list[float]] = {name: [] for name in ("read_db", "verify_db", "read_jsonl", "verify_jsonl")}
        for _ in range(3):
            rates["read_db"].append(timed_rate(count, read_db))
            rates["verify_db"].append(timed_rate(count, verify_db))
            rates["read_jsonl"].append(timed_rate(count, read_jsonl))
            rates["verify_jsonl"].append(timed_rate(count, verify_jsonl))
    finally:
        store.close()
    return {name: median(values) for name, values in rates.items()}


async def _until(done: Callable[[], bool], bound: float) -> None:
    end = time.perf_counter() + bound
    while not done():
        assert time.perf_counter() < end, "the sink did not store every entry in time"
        await asyncio.sleep(0.002)


async def sink_rates(entries: int, rounds: int) -> tuple[float, float]:
    """(unchained, chained) entries/s of the whole sink: fetch from the stream, decode, store, acknowledge.

    ``entries`` are published once; each round a new sink (own workspace, own durable consumer) stores them all.
    """
    plain: list[float] = []
    chained: list[float] = []
    with NatsServer() as server, tempfile.TemporaryDirectory(prefix="hookbus-bench-audit-sink-") as folder:
        async with Bus(server.url, name="bench-audit") as bus:
            await ensure_journal_stream(bus.port)
            nc = await nats.connect(server.url)
            for row in make_rows(entries):
                await nc.publish(row.entry.subject("kernel"), row.entry.encode())
            await nc.flush()
            await nc.close()
            for _ in range(1000):
                state = await bus.port.stream_state(STREAM)
                if state is not None and state.messages >= entries:
                    break
                await asyncio.sleep(0.01)
            for index in range(rounds):
                order = (True, False) if index % 2 else (False, True)
                for link in order:
                    workspace = Path(folder) / f"{index}-{link}"
                    sink = JournalSink(bus, workspace, durable=f"bench-audit-{index}-{link}", chained=link)
                    stop = asyncio.Event()
                    started = time.perf_counter()
                    task = asyncio.create_task(sink.run(stop))
                    try:
                        await _until(lambda s=sink: s.stored >= entries, 120)
                        (chained if link else plain).append(entries / (time.perf_counter() - started))
                    finally:
                        stop.set()
                        await task
                    assert sink.rejected == 0, sink.rejected
    return median(plain), median(chained)


def run(entries: int, rounds: int, sink_entries: int) -> None:
    rows = make_rows(entries)
    chained_rates: list[float] = []
    plain_rates: list[float] = []
    cpu_rates: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="hookbus-bench-audit-") as folder:
        base = Path(folder)
        store_round(base / "warm-up", rows[: BATCH * 4], chained=True)
        last = base / "none"
        for index in range(rounds):
            order = (True, False) if index % 2 else (False, True)
            for chained in order:
                workspace = base / f"{index}-{'chained' if chained else 'plain'}"
                rate, cpu_rate = store_round(workspace, rows, chained)
                (chained_rates if chained else plain_rates).append(rate)
                cpu_rates[chained].append(cpu_rate)
                if chained:
                    last = workspace
        reading = verify_rates(last, entries)
    sink_plain, sink_chained = asyncio.run(sink_rates(sink_entries, rounds))
    sink_ratio = sink_chained / sink_plain
    chained_rate, plain_rate = median(chained_rates), median(plain_rates)
    ratio = chained_rate / plain_rate
    cpu_ratio = median(cpu_rates[True]) / median(cpu_rates[False])
    rows_out = [
        ["store, unchained (baseline)", f"{plain_rate:,.0f} entries/s", "", ""],
        ["store, chained + signed", f"{chained_rate:,.0f} entries/s", f"{ratio:.2f}", verdict(ratio, 0.9)],
        ["store CPU time, unchained (baseline)", f"{median(cpu_rates[False]):,.0f} entries/CPU-s", "", ""],
        ["store CPU time, chained + signed", f"{median(cpu_rates[True]):,.0f} entries/CPU-s", f"{cpu_ratio:.2f}",
         verdict(cpu_ratio, 0.9)],
        ["sink end to end, unchained (baseline)", f"{sink_plain:,.0f} entries/s", "", ""],
        ["sink end to end, chained + signed", f"{sink_chained:,.0f} entries/s", f"{sink_ratio:.2f}",
         verdict(sink_ratio, 0.9)],
        ["read journal.db (baseline)", f"{reading['read_db']:,.0f} entries/s", "", ""],
        ["verify journal.db", f"{reading['verify_db']:,.0f} entries/s",
         f"{reading['verify_db'] / reading['read_db']:.2f}", ""],
        ["read JSONL (baseline)", f"{reading['read_jsonl']:,.0f} entries/s", "", ""],
        ["verify JSONL", f"{reading['verify_jsonl']:,.0f} entries/s",
         f"{reading['verify_jsonl'] / reading['read_jsonl']:.2f}", ""],
    ]  # fmt: skip
    print_table(
        f"journal chain and checkpoints ({entries:,} entries x {rounds} rounds, batches of {BATCH})",
        rows_out,
        ["measure", "rate (median)", "/ baseline", "verdict"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sink-entries", type=int, default=10_000)
    args = parser.parse_args()
    run(args.entries, args.rounds, args.sink_entries)


if __name__ == "__main__":
    main()
