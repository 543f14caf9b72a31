"""An in-process stand-in for nats-server and the nats-py client, for :class:`bus.testing.TestBus`.

It implements the part of the client the transport seam uses (publish,
subscribe with wildcards and queue groups, request/reply with the 503 "no
responders" status, inboxes, flush, close, and JetStream key-value buckets
with watches), so ``Bus`` and everything under it (envelope checks, depth,
the middleware kernel and its view of the registry, module serving, turns)
run unchanged. No network and no threads: routing is a function call, and
each subscription hands its messages to its callback in order from a task of
its own, as nats-py does. Subject matching is :func:`bus.core.subjects.matches`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, cast

from bus.core.clock import random_hex
from bus.core.subjects import matches
from bus.transport.nats_api import KeyValue, Msg, js_errors, nats_errors

#: nats-server's default max_payload.
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024
_NO_RESPONDERS: Final = {"Status": "503"}

Callback = Callable[[Msg], Awaitable[None]]


class InProcessBroker:
    """Routes messages between in-process clients as a nats-server would, and keeps their KV buckets."""

    def __init__(self, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self.subscriptions: list[InProcessSubscription] = []
        self.buckets: dict[str, InProcessKeyValue] = {}
        self._turns: dict[str, itertools.count[int]] = {}

    def connect(
        self, name: str, inbox_prefix: str = "_INBOX", on_error: Callable[[Exception], Awaitable[None]] | None = None
    ) -> InProcessClient:
        """A client of this broker; ``on_error`` hears what nats-py's error callback would (a slow consumer)."""
        return InProcessClient(self, name, inbox_prefix, on_error)

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
                raise nats_errors.FlushTimeoutError() from None


class InProcessSubscription:
    """One subscription: a queue of messages and a task calling the callback with each, in order."""

    def __init__(self, client: InProcessClient, subject: str, queue: str, cb: Callback | None, limit: int) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self._cb = cb
        self._limit = limit
        self._messages: asyncio.Queue[Msg] = asyncio.Queue()
        self._busy = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.reader = asyncio.get_running_loop().create_task(self._read()) if cb is not None else None

    def put(self, subject: str, data: bytes, reply: str, headers: dict[str, str] | None) -> None:
        if self._limit > 0 and self._messages.qsize() >= self._limit:
            self.client.slow_consumer(self, subject, reply)
            return
        self._idle.clear()
        self._messages.put_nowait(Msg(self.client, subject, reply, data, headers))  # type: ignore[arg-type]

    async def idle(self) -> None:
        await self._idle.wait()

    async def next_msg(self, timeout: float | None = None) -> Msg:
        return await asyncio.wait_for(self._messages.get(), timeout)

    async def _read(self) -> None:
        assert self._cb is not None
        while True:
            msg = await self._messages.get()
            try:
                await self._cb(msg)
            except Exception as exc:  # nats-py reports a failing callback and goes on
                await self.client.report(exc)
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
    """The nats-py client as the transport seam uses it, connected to an :class:`InProcessBroker`."""

    def __init__(
        self,
        broker: InProcessBroker,
        name: str,
        inbox_prefix: str,
        on_error: Callable[[Exception], Awaitable[None]] | None = None,
    ) -> None:
        self.broker = broker
        self.name = name
        self.subs: set[InProcessSubscription] = set()
        self.max_payload = broker.max_payload
        self.stats: dict[str, int] = {"reconnects": 0, "in_msgs": 0, "out_msgs": 0}
        self.connected_url = None
        self._server_info: dict[str, Any] = {}
        self._inbox_prefix = inbox_prefix
        self._closed = False
        self._error_cb = on_error
        self._reports: set[asyncio.Future[None]] = set()

    @property
    def is_connected(self) -> bool:
        return not self._closed

    @property
    def is_closed(self) -> bool:
        return self._closed

    def new_inbox(self) -> str:
        return f"{self._inbox_prefix}.{random_hex(22)}"

    def _check_open(self) -> None:
        if self._closed:
            raise nats_errors.ConnectionClosedError()

    async def publish(
        self, subject: str, payload: bytes = b"", reply: str = "", headers: dict[str, str] | None = None
    ) -> None:
        self._check_open()
        if not subject or " " in subject:
            raise nats_errors.BadSubjectError()
        if len(payload) > self.max_payload:
            raise nats_errors.MaxPayloadError()
        self.stats["out_msgs"] += 1
        self.broker.route(subject, bytes(payload), reply, headers)

    async def subscribe(
        self,
        subject: str,
        queue: str = "",
        cb: Callback | None = None,
        pending_msgs_limit: int = 0,
        pending_bytes_limit: int = 0,
        **_: Any,
    ) -> InProcessSubscription:
        self._check_open()
        sub = InProcessSubscription(self, subject, queue, cb, pending_msgs_limit)
        self.broker.subscriptions.append(sub)
        self.subs.add(sub)
        return sub

    async def request(
        self, subject: str, payload: bytes = b"", timeout: float = 0.5, headers: dict[str, str] | None = None
    ) -> Msg:
        inbox = self.new_inbox()
        sub = await self.subscribe(inbox)
        try:
            await self.publish(subject, payload, reply=inbox, headers=headers)
            try:
                msg = await sub.next_msg(timeout)
            except TimeoutError:
                raise nats_errors.TimeoutError() from None
        finally:
            await sub.unsubscribe()
        if msg.headers and msg.headers.get("Status") == "503" and not msg.data:
            raise nats_errors.NoRespondersError()
        return msg

    async def flush(self, timeout: int = 2) -> None:
        """Return once everything published so far has been handed to its subscribers' callbacks."""
        self._check_open()
        await self.broker.settled(timeout)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sub in list(self.subs):
            await sub.unsubscribe()

    async def drain(self) -> None:
        await self.close()

    def slow_consumer(self, sub: InProcessSubscription, subject: str, reply: str) -> None:
        """A message dropped at a full subscription, reported as nats-py does."""
        if self._error_cb is not None:
            error = nats_errors.SlowConsumerError(subject=subject, reply=reply, sid=0, sub=cast(Any, sub))
            task = asyncio.ensure_future(self._error_cb(error))
            self._reports.add(task)
            task.add_done_callback(self._reports.discard)

    async def report(self, exc: Exception) -> None:
        if self._error_cb is not None:
            await self._error_cb(exc)

    def jetstream(self, **_: Any) -> InProcessJetStream:
        return InProcessJetStream(self.broker)


class InProcessJetStream:
    """JetStream as far as key-value buckets go."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker

    async def key_value(self, bucket: str) -> InProcessKeyValue:
        found = self._broker.buckets.get(bucket)
        if found is None:
            raise js_errors.BucketNotFoundError()
        return found

    async def create_key_value(self, config: Any = None, **params: Any) -> InProcessKeyValue:
        bucket = str(params.get("bucket") or getattr(config, "bucket", ""))
        if bucket in self._broker.buckets:
            raise js_errors.BadRequestError()
        created = self._broker.buckets[bucket] = InProcessKeyValue(bucket)
        return created


class InProcessKeyValue:
    """A key-value bucket: put, create, get, delete, and watches of every key (history 1)."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self._entries: dict[str, KeyValue.Entry] = {}
        self._revision = 0
        self._watchers: set[InProcessWatcher] = set()

    def _write(self, key: str, value: bytes, operation: str | None) -> int:
        self._revision += 1
        entry = KeyValue.Entry(self.bucket, key, value, self._revision, 0, time.time_ns(), operation)
        if operation is None:
            self._entries[key] = entry
        else:
            self._entries.pop(key, None)
        for watcher in self._watchers:
            watcher.updates.put_nowait(entry)
        return self._revision

    async def put(self, key: str, value: bytes) -> int:
        return self._write(key, value, None)

    async def create(self, key: str, value: bytes) -> int:
        if key in self._entries:
            raise js_errors.KeyWrongLastSequenceError(description=f"{key} exists")
        return self._write(key, value, None)

    async def get(self, key: str, revision: int | None = None) -> KeyValue.Entry:
        entry = self._entries.get(key)
        if entry is None:
            raise js_errors.KeyNotFoundError()
        return entry

    async def delete(self, key: str, last: int | None = None) -> bool:
        self._write(key, b"", "DEL")
        return True

    async def purge(self, key: str) -> bool:
        self._write(key, b"", "PURGE")
        return True

    async def keys(self, **_: Any) -> list[str]:
        if not self._entries:
            raise js_errors.NoKeysError()
        return list(self._entries)

    async def watchall(self, **_: Any) -> InProcessWatcher:
        watcher = InProcessWatcher(self)
        entries = list(self._entries.values())
        for remaining, entry in zip(range(len(entries) - 1, -1, -1), entries, strict=True):
            watcher.updates.put_nowait(
                KeyValue.Entry(self.bucket, entry.key, entry.value, entry.revision, remaining, entry.created, None)
            )
        if not entries:
            watcher.updates.put_nowait(None)  # the end of what was stored, as nats-py says it
        self._watchers.add(watcher)
        return watcher


class InProcessWatcher:
    """What ``watchall`` returns: the stored entries, then every change, until stopped."""

    def __init__(self, kv: InProcessKeyValue) -> None:
        self._kv = kv
        self.updates: asyncio.Queue[KeyValue.Entry | None] = asyncio.Queue()

    def __aiter__(self) -> AsyncIterator[KeyValue.Entry | None]:
        return self._follow()

    async def _follow(self) -> AsyncIterator[KeyValue.Entry | None]:
        while True:
            yield await self.updates.get()

    async def updates_next(self, timeout: float = 5.0) -> KeyValue.Entry | None:
        return await asyncio.wait_for(self.updates.get(), timeout)

    async def stop(self) -> None:
        self._kv._watchers.discard(self)
