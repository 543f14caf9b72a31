"""An in-process stand-in for nats-server and its clients, for :class:`bus.testing.TestBus`.

Its client implements the transport's :class:`~bus._transport.port.Connection`
(publish on the fast path or plainly, subscribe with wildcards and queue
groups, request/reply with the 503 "no responders" status, inboxes, flush,
close, and key-value buckets with watches as :class:`~bus._transport.kv.Bucket`),
with the transport's types and hookbus's errors, so ``Bus`` and everything
under it (envelope checks, depth, the middleware kernel and its view of the
registry, module serving, turns) run unchanged. It keeps no JetStream: streams
and the claim check's object store are refused with a hookbus error, so
oversized events are cut to fit as on a server without the bucket. No network and no threads:
routing is a function call, and each subscription hands its messages to its
callback in order from a task of its own, as nats-py does. Subject matching
is :func:`bus._core.subjects.matches`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from bus._core.claim import check_ref
from bus._core.clock import random_hex
from bus._core.envelope_schema import PayloadRefMsg
from bus._core.errors import (
    JournalError,
    NoResponders,
    NotSent,
    PayloadRefError,
    RegistryError,
    RequestTimeout,
    SubjectError,
    TransportError,
)
from bus._core.subjects import PAYLOADS_BUCKET, matches
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.tasks import TaskSet
from bus._transport.kv import Bucket, KvEntry, KvWatch
from bus._transport.port import ObjectStore, RawHandler, RawMessage, Trouble, TroubleCallback
from bus._transport.streams import PullConsumer, StreamMessage, StreamSpec, StreamState

log = logging.getLogger("hookbus.payloads")
_NO_STORE: Final = "the in-process broker keeps no object store"

#: nats-server's default max_payload.
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024
_NO_RESPONDERS: Final = {"Status": "503"}


@dataclass(frozen=True, slots=True)
class InProcessMessage:
    """A message as an in-process subscription delivers it (a :class:`~bus._transport.port.RawMessage`)."""

    subject: str
    reply: str
    data: bytes
    headers: dict[str, str] | None = None


class InProcessBroker:
    """Routes messages between in-process clients as a nats-server would, and keeps their KV buckets."""

    def __init__(self, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self.subscriptions: list[InProcessSubscription] = []
        self.buckets: dict[str, InProcessBucket] = {}
        self._turns: dict[str, itertools.count[int]] = {}

    def connect(
        self, name: str, inbox_prefix: str = "_INBOX", on_trouble: TroubleCallback | None = None
    ) -> InProcessClient:
        """A client of this broker; ``on_trouble`` hears what a real connection reports (a slow consumer)."""
        return InProcessClient(self, name, inbox_prefix, on_trouble)

    def route(self, subject: str, data: bytes, reply: str, headers: dict[str, str] | None = None) -> int:
        """Queue the message at every matching subscription (one member per queue group); return how many."""
        groups: dict[str, list[InProcessSubscription]] = {}
        count = 0
        for sub in self.subscriptions:
            if not matches(sub.subject, subject):
                continue
            if sub.queue:
                groups.setdefault(sub.queue, []).append(sub)  # a group is its name, whatever the patterns
            else:
                sub.put(subject, data, reply, headers)
                count += 1
        for queue, members in groups.items():  # in turn, so that a test sees every member get its share
            turn = next(self._turns.setdefault(queue, itertools.count()))
            members[turn % len(members)].put(subject, data, reply, headers)
            count += 1
        if not count and reply:  # what nats-server answers a request nobody listens to
            self.route(reply, b"", "", _NO_RESPONDERS)
        return count

    async def settled(self, timeout: float) -> None:
        """Wait until every subscription has handed what it holds to its callback (but the caller's own)."""
        current = asyncio.current_task()
        deadline = asyncio.get_running_loop().time() + timeout
        for sub in list(self.subscriptions):
            if sub.reader is None or sub.reader is current:
                continue  # read by next_msg, or the caller's own (it cannot wait for itself)
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(sub.idle(), max(remaining, 0))
            except TimeoutError:
                raise TimeoutError(f"in-process subscribers did not take their messages within {timeout}s") from None


class InProcessSubscription:
    """One subscription: a queue of messages and a task calling the callback with each, in order."""

    def __init__(self, client: InProcessClient, subject: str, queue: str, cb: RawHandler | None, limit: int) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self._cb = cb
        self._limit = limit
        self._messages: asyncio.Queue[InProcessMessage] = asyncio.Queue()
        self._busy = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.reader = asyncio.get_running_loop().create_task(self._read()) if cb is not None else None

    def put(self, subject: str, data: bytes, reply: str, headers: dict[str, str] | None) -> None:
        if self._limit > 0 and self._messages.qsize() >= self._limit:
            self.client.slow_consumer(self, subject, reply)
            return
        self._idle.clear()
        self._messages.put_nowait(InProcessMessage(subject, reply, data, headers))

    async def idle(self) -> None:
        await self._idle.wait()

    async def next_msg(self, timeout: float | None = None) -> InProcessMessage:
        return await asyncio.wait_for(self._messages.get(), timeout)

    async def _read(self) -> None:
        assert self._cb is not None
        while True:
            msg = await self._messages.get()
            try:
                await self._cb(msg)
            except Exception as exc:  # nats-py reports a failing callback and goes on
                await self.client.report(Trouble.OTHER, exc)
            if self._messages.empty():
                self._idle.set()

    async def unsubscribe(self, limit: int = 0) -> None:
        broker = self.client.broker
        if self in broker.subscriptions:
            broker.subscriptions.remove(self)
        self.client.subs.discard(self)
        self._idle.set()
        if self.reader is not None and self.reader is not asyncio.current_task():
            self.reader.cancel()

    async def drain(self) -> None:
        await self.idle()
        await self.unsubscribe()


class InProcessClient:
    """A connection to an :class:`InProcessBroker`: the transport's Connection, in process."""

    def __init__(
        self, broker: InProcessBroker, name: str, inbox_prefix: str, on_trouble: TroubleCallback | None = None
    ) -> None:
        self.broker = broker
        self.name = name
        self.subs: set[InProcessSubscription] = set()
        self.max_payload = broker.max_payload
        self.stats: dict[str, int] = {"in_msgs": 0, "out_msgs": 0}
        self._inbox_prefix = inbox_prefix
        self._closed = False
        self._on_trouble = on_trouble
        self._reports: TaskSet[None] = TaskSet()

    @property
    def is_connected(self) -> bool:
        return not self._closed

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def server(self) -> str:
        return "in-process"

    @property
    def raw(self) -> InProcessClient:
        return self

    def new_inbox(self) -> str:
        return f"{self._inbox_prefix}.{random_hex(22)}"

    def push(self, subject: str, data: bytes, reply: str = "") -> None:
        """Route at once (what the fast path's buffering amounts to in process)."""
        if self._closed:
            raise NotSent("closed", f"{self.name} is closed")
        if len(data) > self.max_payload:
            raise NotSent("oversize", f"{len(data)} bytes, over max_payload {self.max_payload}")
        self.stats["out_msgs"] += 1
        self.broker.route(subject, bytes(data), reply)

    async def publish(self, subject: str, data: bytes, reply: str = "") -> None:
        if not subject or " " in subject:
            raise SubjectError(subject, "not a subject a broker takes")
        self.push(subject, data, reply)

    async def subscribe(
        self, subject: str, cb: RawHandler | None = None, *, queue: str = "", pending_msgs_limit: int | None = None
    ) -> InProcessSubscription:
        if self._closed:
            raise NotSent("closed", f"{self.name} is closed")
        sub = InProcessSubscription(self, subject, queue, cb, pending_msgs_limit or 0)
        self.broker.subscriptions.append(sub)
        self.subs.add(sub)
        return sub

    async def subscribe_direct(
        self, subject: str, cb: Callable[[RawMessage], None], *, queue: str = ""
    ) -> InProcessSubscription:
        """As a direct subscription's contract says; in process, from the subscription's own reader."""

        async def run(msg: RawMessage) -> None:
            cb(msg)

        return await self.subscribe(subject, run, queue=queue)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        inbox = self.new_inbox()
        sub = await self.subscribe(inbox)
        try:
            self.push(subject, data, inbox)
            try:
                msg = await sub.next_msg(timeout)
            except TimeoutError:
                raise RequestTimeout(f"no reply on {subject} within {timeout}s") from None
        finally:
            await sub.unsubscribe()
        if msg.headers and msg.headers.get("Status") == "503" and not msg.data:
            raise NoResponders(f"nobody answers on {subject}")
        return msg.data

    async def flush(self, timeout: float = 2.0) -> None:
        """Return once everything published so far has been handed to its subscribers' callbacks."""
        if self._closed:
            raise NotSent("closed", f"{self.name} is closed")
        await self.broker.settled(timeout)

    async def close(self, flush_timeout: float = 0.0) -> bool:
        if self._closed:
            return True
        flushed = True
        if flush_timeout > 0:
            try:
                await self.broker.settled(flush_timeout)
            except TimeoutError:
                flushed = False
        self._closed = True
        for sub in list(self.subs):
            await sub.unsubscribe()
        return flushed

    def slow_consumer(self, sub: InProcessSubscription, subject: str, reply: str) -> None:
        """A message dropped at a full subscription, reported as a real connection does."""
        if self._on_trouble is not None:
            error = TransportError(f"slow consumer: a message on {subject} dropped at {sub.subject!r}")
            self._reports.keep(asyncio.ensure_future(self._on_trouble(Trouble.SLOW_CONSUMER, error)))

    async def report(self, trouble: Trouble, exc: Exception) -> None:
        if self._on_trouble is not None:
            await self._on_trouble(trouble, exc)

    async def open_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """The broker's bucket ``name``, created on first use (``ttl_s`` is not applied in process)."""
        bucket = self.broker.buckets.get(name)
        if bucket is None:
            bucket = self.broker.buckets[name] = InProcessBucket(name)
        return bucket

    async def ensure_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """The broker's bucket ``name`` (an in-process bucket has no rollups nor purges to refuse)."""
        return await self.open_bucket(name, ttl_s)

    async def ensure_stream(self, spec: StreamSpec) -> StreamState:
        raise JournalError(f"cannot create stream {spec.name}: the in-process broker keeps no JetStream streams")

    async def stream_state(self, name: str) -> StreamState | None:
        raise JournalError(f"cannot look up stream {name}: the in-process broker keeps no JetStream streams")

    async def pull_consumer(
        self, stream: str, subject: str, durable: str, *, ack_wait_s: float, max_ack_pending: int
    ) -> PullConsumer:
        raise JournalError(f"cannot open consumer {durable}: the in-process broker keeps no JetStream streams")

    async def read_since(self, stream: str, since: datetime) -> AsyncIterator[StreamMessage]:
        raise JournalError(f"cannot read stream {stream}: the in-process broker keeps no JetStream streams")
        yield  # an async generator, as the transport's is

    def payload_store(self, max_object_bytes: int) -> ObjectStore:
        return NoObjectStore(max_object_bytes)

    async def ensure_payloads_bucket(self) -> None:
        raise RegistryError(f"cannot create the {PAYLOADS_BUCKET} bucket: {_NO_STORE}")


class NoObjectStore:
    """The claim check's store of an in-process client: keeps nothing, so oversized events are cut to fit.

    A reference received anyway is checked as the transport's store checks it,
    then refused with PayloadRefError.
    """

    def __init__(self, max_object_bytes: int) -> None:
        self.max_object_bytes = max_object_bytes
        self._log = RateLimitedLog(log, interval=5.0)

    async def put(self, body: bytes) -> PayloadRefMsg | None:
        self._log.warning("could not keep %d bytes in %s (%s): cut to fit", len(body), PAYLOADS_BUCKET, _NO_STORE)
        return None

    async def fetch(self, subject: str, ref: PayloadRefMsg) -> bytes:
        check_ref(subject, ref, self.max_object_bytes)
        raise PayloadRefError(subject, f"could not read object {ref.name} of {PAYLOADS_BUCKET}: {_NO_STORE}")


@dataclass(frozen=True, slots=True)
class _Update:
    """One change as a watch delivers it (the shape :class:`~bus._transport.kv.KvWatch` reads)."""

    key: str
    value: bytes
    revision: int
    operation: str | None


class InProcessBucket(Bucket):
    """A key-value bucket in process: get, put, create, delete, and watches of every key (history 1)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, None)
        self._entries: dict[str, KvEntry] = {}
        self._revision = 0
        self._watchers: set[InProcessWatcher] = set()

    def _write(self, key: str, value: bytes, operation: str | None) -> int:
        self._revision += 1
        if operation is None:
            self._entries[key] = KvEntry(key, value or None, self._revision)
        else:
            self._entries.pop(key, None)
        for watcher in self._watchers:
            watcher.updates.put_nowait(_Update(key, value, self._revision, operation))
        return self._revision

    async def get(self, key: str) -> KvEntry | None:
        return self._entries.get(key)

    async def put(self, key: str, value: bytes) -> int:
        return self._write(key, value, None)

    async def create(self, key: str, value: bytes) -> bool:
        if key in self._entries:
            return False
        self._write(key, value, None)
        return True

    async def delete(self, key: str) -> None:
        self._write(key, b"", "DEL")

    async def watch(self) -> KvWatch:
        watcher = InProcessWatcher(self)
        entries = list(self._entries.values())
        for entry in entries:
            watcher.updates.put_nowait(_Update(entry.key, entry.value or b"", entry.revision, None))
        watcher.updates.put_nowait(None)  # the end of what was stored
        self._watchers.add(watcher)
        return KvWatch(self.name, watcher)


class InProcessWatcher:
    """What a watch follows: the stored entries, then every change, until stopped."""

    def __init__(self, bucket: InProcessBucket) -> None:
        self._bucket = bucket
        self.updates: asyncio.Queue[_Update | None] = asyncio.Queue()

    def __aiter__(self) -> AsyncIterator[_Update | None]:
        return self._follow()

    async def _follow(self) -> AsyncIterator[_Update | None]:
        while True:
            yield await self.updates.get()

    async def stop(self) -> None:
        self._bucket._watchers.discard(self)
