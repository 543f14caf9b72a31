"""The journal sink: takes entries from the JetStream stream and stores them.

A durable pull consumer reads the ``HOOKBUS_JOURNAL`` stream in batches; each
batch is stored in one SQLite transaction (new ids only) and written to JSONL,
and only then acknowledged. A sink that crashes after storing but before
acknowledging gets the batch again and stores nothing twice; one that was
stopped finds everything it missed waiting in the stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bus.client import Bus
from bus.journal import STREAM, SUBJECT_PREFIX, JournalEntry, JournalError, decode_entry, ensure_stream
from bus.ratelog import RateLimitedLog
from subscribers.journal_store import DB_NAME, JSONL_DIR, JournalStore, JsonlWriter

if TYPE_CHECKING:
    from bus.cli.up import UpContext

log = logging.getLogger("hookbus.journal")

DURABLE_PREFIX: Final = "hookbus-journal-"


def durable_for(workspace: Path) -> str:
    """The consumer name of a workspace's sink: each journal.db gets every entry.

    Sinks of different workspaces (one per machine, say) must not share one
    consumer, or each database would hold only a part of the journal; a sink
    restarted on the same workspace takes up where it stopped.
    """
    where = f"{socket.gethostname()}:{workspace.resolve()}"
    return DURABLE_PREFIX + hashlib.sha256(where.encode()).hexdigest()[:12]


BATCH: Final = 500
#: Unacknowledged entries (a crashed sink's last batch) come back after this many seconds.
ACK_WAIT_S: Final = 5


class JournalSink:
    """Moves journal entries from the stream into the workspace's SQLite and JSONL files."""

    def __init__(self, bus: Bus, workspace: Path, durable: str | None = None) -> None:
        self.bus = bus
        self.store = JournalStore(workspace / DB_NAME)
        self.jsonl = JsonlWriter(workspace / JSONL_DIR)
        self.durable = durable or durable_for(workspace)
        self.stored = 0
        self.rejected = 0
        self._bad_log = RateLimitedLog(log)

    async def run(self, stop: asyncio.Event) -> None:
        """Store entries until ``stop`` is set."""
        try:
            await ensure_stream(self.bus)
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            log.error("journal sink disabled: JetStream is not available on %s (%r)", ", ".join(self.bus.servers), exc)
            return
        js = self.bus.nc.jetstream()
        config = ConsumerConfig(
            durable_name=self.durable,
            # Explicit acks: acknowledging "all up to N" would also acknowledge what a
            # crashed sink had fetched and never stored.
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=ACK_WAIT_S,
            max_ack_pending=BATCH * 4,
        )
        sub = await js.pull_subscribe(f"{SUBJECT_PREFIX}.>", durable=self.durable, stream=STREAM, config=config)
        try:
            while not stop.is_set():
                try:
                    batch = await sub.fetch(BATCH, timeout=0.5)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                except (nats.errors.ConnectionClosedError, nats.js.errors.Error, nats.errors.Error) as exc:
                    log.warning("journal sink: fetch failed (%r); retrying", exc)
                    await asyncio.sleep(0.5)
                    continue
                if batch:
                    await self._store(batch)
        finally:
            self.store.close()

    async def _store(self, batch: list[Msg]) -> None:
        entries: list[JournalEntry] = []
        for msg in batch:
            try:
                entries.append(decode_entry(msg.data))
            except JournalError as exc:
                self.rejected += 1
                self._bad_log.warning("journal sink: %s on %s; skipped", exc, msg.subject)
        fresh = await asyncio.to_thread(self.store.insert_many, entries)
        if fresh:
            await asyncio.to_thread(self.jsonl.write, fresh)
        self.stored += len(fresh)
        for msg in batch:  # only now that the batch is stored
            await msg.ack()


@asynccontextmanager
async def service(ctx: UpContext) -> AsyncIterator[None]:
    """``hookbus up`` runs the sink for its workspace."""
    sink = JournalSink(ctx.bus, ctx.workspace)
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop), name="journal-sink")
    ctx.lines.append(f"  journal  {sink.store.path} (+ {sink.jsonl.directory}/*.jsonl)")
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
