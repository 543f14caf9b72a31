"""The journal sink: takes entries from the JetStream stream and stores them.

A durable pull consumer reads the ``HOOKBUS_JOURNAL`` stream in batches. Every
entry is checked and clamped as if its publisher were hostile
(:func:`bus._journal.entries.decode_checked`); one that cannot be stored is logged
(rate-limited), counted and skipped, and the sink goes on. Each batch is
stored in one SQLite transaction keyed by stream sequence, written to JSONL,
and only then acknowledged: a sink that crashes after storing but before
acknowledging gets the batch again and stores nothing twice; one that was
stopped finds everything it missed waiting in the stream; one whose consumer
was deleted under it makes it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Final

from prometheus_client import Counter
from prometheus_client.registry import REGISTRY, CollectorRegistry

from bus._client import Bus
from bus._core.clock import timestamp_ms
from bus._core.errors import JournalError
from bus._journal.entries import (
    STREAM,
    SUBJECT_PREFIX,
    TEXT_CAP,
    decode_checked,
    ensure_journal_stream,
    subject_origin,
)
from bus._journal.subjects import JOURNAL_DURABLE_PREFIX
from bus._metrics import register_once
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.stats import PREFIX
from bus._service import ServiceContext
from bus._transport.streams import PullConsumer, StreamMessage, ack, nak
from subscribers.journal._chain import Chains
from subscribers.journal._checkpoints import Checkpointer, JournalKey, last_signed
from subscribers.journal._groups import durable_for_group
from subscribers.journal._store import DB_NAME, JSONL_DIR, JournalStore, JsonlWriter, Received

log = logging.getLogger("hookbus.journal")

DURABLE_PREFIX: Final = JOURNAL_DURABLE_PREFIX

#: Why an entry was not stored: not a JSON object, a field out of its rules, a kind not
#: its subject's (or unknown), refused by SQLite.
REJECT_REASONS: Final = ("malformed", "invalid", "kind", "store")
STORED: Final = Counter(f"{PREFIX}_journal_entries_stored", "Journal entries stored by the sink.", registry=None)
REJECTED: Final = Counter(
    f"{PREFIX}_journal_entries_rejected",
    "Journal entries the sink could not store: logged and skipped.",
    ["reason"],
    registry=None,
)
CLAMPED: Final = Counter(
    f"{PREFIX}_journal_entries_clamped", "Journal entries stored with a text field cut to its cap.", registry=None
)
JSONL_ERRORS: Final = Counter(
    f"{PREFIX}_journal_jsonl_errors", "Batches stored in SQLite whose JSONL copy could not be written.", registry=None
)
for _reason in REJECT_REASONS:
    REJECTED.labels(_reason)


def register_metrics(registry: CollectorRegistry = REGISTRY) -> None:
    """Expose these metrics on ``registry``; the service calls it when it starts (importing registers nothing)."""
    register_once(
        (
            STORED,
            REJECTED,
            CLAMPED,
            JSONL_ERRORS,
        ),
        registry,
    )


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
#: After this many idle seconds the sink checks that its consumer still exists.
CONSUMER_CHECK_S: Final = 2.0


class JournalSink:
    """Moves journal entries from the stream into the workspace's SQLite and JSONL files."""

    def __init__(
        self,
        bus: Bus,
        workspace: Path,
        durable: str | None = None,
        *,
        chained: bool = True,
        group: str | None = None,
        batch: int = BATCH,
    ) -> None:
        """``chained`` False stores entries unchained and unsigned: only bench/bench_audit.py's baseline does.
        ``group``: share one consumer with the group's other sinks (:func:`durable_for_group`)."""
        register_metrics()
        self._batch = batch
        self._chained = chained
        self.bus = bus
        self.store = JournalStore(workspace / DB_NAME)
        self.jsonl = JsonlWriter(workspace / JSONL_DIR)
        self.group = group
        self.durable = durable or (durable_for_group(group) if group else durable_for(workspace))
        # The chains go on where this database's left off; the checkpoints from its last signed ones.
        self.chains = Chains(self.store.heads())
        self.key = JournalKey.of_workspace(workspace)
        self.checkpointer = Checkpointer(self.key, self.durable, last_signed(self.store.checkpoints()))
        self.stored = 0
        self.rejected = 0
        self.clamped = 0
        self.checkpoints = 0
        self._stream = ""
        self._bad_log = RateLimitedLog(log)
        self._cut_log = RateLimitedLog(log)
        self._store_log = RateLimitedLog(log)

    async def run(self, stop: asyncio.Event) -> None:
        """Store entries until ``stop`` is set."""
        try:
            sub = await self._subscribe()
        except JournalError as exc:
            log.error("journal sink disabled: JetStream is not available on %s (%r)", ", ".join(self.bus.servers), exc)
            self.store.close()
            return
        loop = asyncio.get_running_loop()
        checked = loop.time()
        ahead: asyncio.Task[list[StreamMessage]] | None = None
        try:
            while not stop.is_set():
                fetching, ahead = ahead, None
                try:
                    batch = await (fetching or sub.fetch(self._batch, timeout=0.5))
                except JournalError as exc:
                    log.warning("journal sink: %s; retrying", exc)
                    await asyncio.sleep(0.5)
                    sub = await self._resubscribe_if_gone(sub)
                    continue
                if batch or self.chains.heads:
                    await self._checkpoint()
                if batch:
                    # The next batch comes while this one is written (SQLite and JSONL in threads): the
                    # store rate is the slower of the two, not their sum (bench/bench_scale.py, journal).
                    ahead = asyncio.create_task(sub.fetch(self._batch, timeout=0.5), name="journal-sink-fetch")
                    await self._store(batch)
                elif loop.time() - checked >= CONSUMER_CHECK_S:  # idle: is the consumer still there?
                    checked = loop.time()
                    sub = await self._resubscribe_if_gone(sub)
            if ahead is not None:  # stopping: what was fetched is stored now, not sent again after ack_wait
                fetching, ahead = ahead, None
                with contextlib.suppress(JournalError):
                    batch = await fetching
                    if batch:
                        await self._store(batch)
        finally:
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)
            with contextlib.suppress(sqlite3.Error, OSError):  # stopping: the tail signed too
                await self._checkpoint(final=True)
            self.store.close()

    async def _subscribe(self) -> PullConsumer:
        # the bus role makes the stream; the sink role may only look at it, unless it runs alone
        # on a server nobody prepared
        info = await self.bus.port.stream_state(STREAM) or await ensure_journal_stream(self.bus.port)
        self._stream = info.created  # a stream deleted and made again counts its sequence from 1 again
        return await self.bus.port.pull_consumer(
            STREAM, f"{SUBJECT_PREFIX}.>", self.durable, ack_wait_s=ACK_WAIT_S, max_ack_pending=BATCH * 4
        )

    async def _resubscribe_if_gone(self, sub: PullConsumer) -> PullConsumer:
        """Make the consumer (and the stream) again if someone deleted them; else keep ``sub``."""
        exists = await sub.exists()
        if exists is not False:
            return sub  # there, or no answer now (disconnected, say): look again later
        log.warning("journal sink: consumer %s is gone; making it again", self.durable)
        await sub.close()
        try:
            return await self._subscribe()
        except JournalError as exc:
            log.warning("journal sink: could not make consumer %s again (%s); retrying", self.durable, exc)
            return sub

    async def _store(self, batch: list[StreamMessage]) -> None:
        rows = [row for row in map(self._receive, batch) if row is not None]
        try:
            chains = self.chains if self._chained else None
            fresh, refused = await asyncio.to_thread(self.store.insert_many, rows, chains)
        except sqlite3.Error as exc:  # the database itself: nothing stored; the batch comes back
            self._store_log.warning("journal sink: cannot write %s (%r); retrying the batch", self.store.path, exc)
            for msg in batch:
                await nak(msg, ACK_WAIT_S)
            return
        for row, reason in refused:
            self._reject("store", f"SQLite refused it ({reason})", f"stream sequence {row.stream_seq}")
        if fresh:
            try:
                await asyncio.to_thread(self.jsonl.write, fresh)
            except OSError as exc:
                JSONL_ERRORS.inc()
                self._store_log.warning("journal sink: JSONL not written (%r); the entries are in SQLite", exc)
        self.stored += len(fresh)
        STORED.inc(len(fresh))
        for msg in batch:  # only now that the batch is stored
            await ack(msg)  # not acknowledged: it comes back, and is a duplicate

    async def _checkpoint(self, final: bool = False) -> None:
        """Sign the chains that are due and keep the checkpoints in SQLite and JSONL."""
        made = self.checkpointer.due(self.chains, final) if self._chained else []
        if not made:
            return

        def keep() -> None:
            for checkpoint in made:
                self.store.add_checkpoint(checkpoint)
            self.jsonl.write_checkpoints(made)

        await asyncio.to_thread(keep)
        self.checkpoints += len(made)

    def _receive(self, msg: StreamMessage) -> Received | None:
        """The row for one message, or None (counted and logged) if it cannot be stored."""
        if msg.stream_seq is None or msg.timestamp is None:
            self._reject("malformed", f"no stream metadata ({msg.metadata_problem})", msg.subject)
            return None
        try:
            entry, cut = decode_checked(msg.data, msg.subject)
        except JournalError as exc:
            self._reject(exc.reason, str(exc), f"{msg.subject[:TEXT_CAP]} (stream sequence {msg.stream_seq})")
            return None
        if cut:
            self.clamped += 1
            CLAMPED.inc()
            self._cut_log.warning("journal sink: entry %s stored with %s cut to size", entry.id, ", ".join(cut))
        origin = subject_origin(msg.subject)
        return Received(
            entry,
            stream_seq=msg.stream_seq,
            received=_timestamp(msg.timestamp),
            stream=self._stream,
            origin=origin[:TEXT_CAP] if origin else None,
        )

    def _reject(self, reason: str, why: str, where: str) -> None:
        self.rejected += 1
        REJECTED.labels(reason).inc()
        self._bad_log.warning("journal sink: %s on %s; skipped", why, where)


def _timestamp(moment: datetime) -> str:
    return timestamp_ms(int(moment.timestamp() * 1000))


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """``hookbus up`` runs the sink for its workspace."""
    sink = JournalSink(ctx.bus, ctx.workspace)
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop), name="journal-sink")
    ctx.lines.append(f"  journal  {sink.store.path} (+ {sink.jsonl.directory}/*.jsonl)")
    ctx.lines.append(f"  journal key {sink.key.public_key} (hookbus journal verify --public-key)")
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
