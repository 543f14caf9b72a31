"""Serving a Module: the request subscription, the announcement (re-put on change, or beating), a bounded shutdown.

Protocol 2 (no ``heartbeat``): the announcement is put once, again when this
process's connection comes back (a kernel may have found it absent meanwhile)
and before the bucket's max age; nothing else goes to the registry while it
serves. Protocol 1 (a ``heartbeat``): it is re-put every heartbeat."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from dataclasses import replace
from typing import Any, Final, Protocol

from bus._core.errors import RegistryError
from bus._core.middleware_schema import MiddlewareReply, MiddlewareRequest
from bus._core.schema import decode, encode
from bus._core.subjects import is_reply_inbox
from bus._middleware.guards import GUARDS_BUCKET, mark_stopped, put_records, remove_records
from bus._middleware.registry import (
    MODULES_BUCKET,
    Announced,
    announcement_of,
    check_handler_count,
    open_bucket,
    refresh_for,
    request_subject,
)
from bus._runtime.eager import run_eager
from bus._runtime.tasks import TaskSet, stop_if_cancelled
from bus._transport.kv import Bucket
from bus._transport.port import TRANSPORT_FAILURES, Port, RawMessage

log = logging.getLogger("hookbus.module")


class Served(Announced, Protocol):
    """What a ModuleServer serves: what it announces (name, heartbeat, declarations), and its request handler."""

    @property
    def concurrency(self) -> int: ...

    async def answer(self, request: MiddlewareRequest, bus: Any = None) -> MiddlewareReply: ...


class ServedOn(Protocol):
    """What a module is served on: a bus whose port carries the requests (its handlers get the bus itself)."""

    @property
    def port(self) -> Port: ...


#: How long a stopping module lets its in-flight handlers finish before cancelling them.
STOP_GRACE: Final = 2.0
#: How often a protocol 2 module looks (locally, no message) whether its connection came back.
RECONNECT_LOOK_S: Final = 1.0
#: Requests from agents queued while every slot is busy; beyond this they are dropped (the kernel's
#: timeout then applies the fail mode).
MAX_WAITING: Final = 10_000


class ModuleServer:
    """Runs one Module on one Bus until cancelled."""

    def __init__(self, module: Served, bus: ServedOn, *, detach_on_stop: bool = False) -> None:
        self.module = module
        self.bus = bus  # handed to the handlers (``ctx.bus``)
        self.port = bus.port
        self.detach_on_stop = detach_on_stop
        self.announcement = announcement_of(module)
        check_handler_count(module.name, len(self.announcement.declarations))
        self._tasks: TaskSet[Any] = TaskSet()  # requests being answered (each holds a slot)
        self._sending: TaskSet[None] = TaskSet()  # replies that had to wait to be sent (they hold no slot)
        self._nested = 0  # of the running tasks, those answering nested calls (depth > 0)
        self._waiting: collections.deque[tuple[str, MiddlewareRequest]] = collections.deque()
        self._waiting_nested: collections.deque[tuple[str, MiddlewareRequest]] = collections.deque()

    async def run(self, ready: asyncio.Event | None = None) -> None:
        kv = await open_bucket(self.port, MODULES_BUCKET)
        if self.module.heartbeat is None:  # re-put within a third of what this bucket keeps
            self.announcement = replace(self.announcement, refresh=refresh_for(await kv.max_age()))
        guards = await self._guard_records()
        subject = request_subject(self.announcement)
        sub = await self.port.subscribe_direct(subject, self._on_msg, queue=subject)
        await self.port.flush(5.0)  # the subscription is in place before the module announces itself
        key, data = self.announcement.key, self.announcement.to_bytes()
        try:
            await kv.put(key, data)
            log.info("module %s serving on %s (instance %s)", self.module.name, subject, self.announcement.instance)
            if ready is not None:
                ready.set()
            if self.announcement.refresh:
                await self._refresh(kv, key)
            while True:
                await asyncio.sleep(self.announcement.heartbeat)
                await self._beat(kv, key)
                stop_if_cancelled()  # a cancel during the beat's request can be swallowed (Python 3.11)
        finally:
            await self._stop(sub, kv, key, guards)

    async def _guard_records(self) -> Bucket | None:
        """Record the fail-closed handlers (before announcing), so they stay in force if this process dies."""
        if not any(decl.fail_closed for decl in self.module.declarations):
            return None
        try:
            guards = await open_bucket(self.port, GUARDS_BUCKET)
            await put_records(guards, self.module.declarations)
        except RegistryError as exc:
            log.warning("module %s: could not record its fail-closed handlers (%r)", self.module.name, exc)
            return None
        return guards

    async def _refresh(self, kv: Bucket, key: str) -> None:
        """Protocol 2: re-put before the max age and after each reconnect; nothing on the wire in between."""
        loop = asyncio.get_running_loop()
        stats = self.port.stats
        reconnects, due = stats.reconnects, loop.time() + self.announcement.refresh
        while True:
            await asyncio.sleep(min(RECONNECT_LOOK_S, self.announcement.refresh))
            if (stats.reconnects != reconnects or loop.time() >= due) and await self._beat(kv, key):
                reconnects, due = stats.reconnects, loop.time() + self.announcement.refresh
            stop_if_cancelled()

    async def _beat(self, kv: Bucket, key: str) -> bool:
        try:
            await kv.put(key, self.announcement.to_bytes())
        except RegistryError as exc:
            log.warning("module %s: announcement put failed (%s); retrying", self.module.name, exc)
            return False
        return True

    async def _stop(self, sub: Any, kv: Bucket, key: str, guards: Bucket | None) -> None:
        if guards is not None:  # they stay in force (only an operator detaches them) unless told otherwise
            end = remove_records if self.detach_on_stop else mark_stopped
            with contextlib.suppress(RegistryError, asyncio.TimeoutError):
                await asyncio.wait_for(end(guards, self.module.declarations), STOP_GRACE)
        with contextlib.suppress(RegistryError, asyncio.TimeoutError):
            await asyncio.wait_for(kv.delete(key), STOP_GRACE)
        # Drain, not unsubscribe: another instance may share the queue group (a hot swap, a rolling
        # restart), and a request the server already routed here must be answered, not dropped
        # (the kernel would wait out the timeout and apply the fail mode: a guard not holding).
        with contextlib.suppress(*TRANSPORT_FAILURES, asyncio.TimeoutError):
            await asyncio.wait_for(sub.drain(), STOP_GRACE)
        # Requests queued behind the running ones start as those end, and replies may wait to be sent:
        # wait for all of it within the grace, then cancel what is left (and let it end).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_GRACE
        while (self._tasks or self._sending) and loop.time() < deadline:
            await asyncio.wait({*self._tasks, *self._sending}, timeout=deadline - loop.time())
        pending = {*self._tasks, *self._sending}
        for task in pending:
            task.cancel()
        if pending:
            log.warning("module %s: %d requests still running at stop: cancelled", self.module.name, len(pending))
            await asyncio.wait(pending, timeout=1.0)

    def _on_msg(self, msg: RawMessage) -> None:
        """Each request as the reader hands it over (a direct subscription): answered inline if it can be."""
        try:
            request = decode(msg.data, MiddlewareRequest, "request", ValueError)  # ctx.depth below the limit
        except ValueError as exc:
            self._reply(msg.reply, MiddlewareReply(error=f"malformed {exc}"))
            return
        # Calls from an agent (depth 0) share ``concurrency`` slots; calls made while handling one
        # (A -> B -> A) get as many again of their own, so re-entry never waits behind agents'
        # calls, and the total stays bounded whatever depth a request claims. Beyond that they
        # wait in a queue (never by blocking this callback: the calls behind it would wait too).
        nested = request.ctx.depth > 0
        if self._has_slot(nested):
            self._start(msg.reply, request, nested)
        elif len(self._waiting) + len(self._waiting_nested) < MAX_WAITING:
            (self._waiting_nested if nested else self._waiting).append((msg.reply, request))
        else:
            log.warning("module %s: %d requests waiting; one dropped", self.module.name, MAX_WAITING)

    def _has_slot(self, nested: bool) -> bool:
        if nested:
            return self._nested < self.module.concurrency
        return len(self._tasks) - self._nested < self.module.concurrency

    def _start(self, inbox: str, request: MiddlewareRequest, nested: bool) -> None:
        """Run the handlers inline as far as they go (most never wait: no task for them), and reply if they
        finished; else a task answers later."""
        try:
            finished, value = run_eager(self.module.answer(request, self.bus))
        except asyncio.CancelledError as exc:  # a handler cancelling itself inline: this request failed, nothing else
            self._reply(inbox, MiddlewareReply(error=f"request failed: {exc!r}"))
            return
        except Exception as exc:  # handler faults are caught in answer(): this is a malformed request
            self._reply(inbox, MiddlewareReply(error=f"malformed request: {exc!r}"))
            return
        if finished:
            self._reply(inbox, value)
            return
        self._tasks.add(value)
        self._nested += nested
        value.add_done_callback(functools.partial(self._finished, inbox, nested))

    def _finished(self, inbox: str, nested: bool, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._nested -= nested
        if task.cancelled():  # cancelled at stop, past the grace: answered, so the kernel need not wait it out
            reply = MiddlewareReply(error="request cancelled: the module is stopping")
        else:
            failed = task.exception()
            reply = MiddlewareReply(error=f"request failed: {failed!r}") if failed is not None else task.result()
        self._reply(inbox, reply)
        for queue, deeper in ((self._waiting_nested, True), (self._waiting, False)):
            while queue and self._has_slot(deeper):
                self._start(*queue.popleft(), deeper)

    def _reply(self, inbox: str, reply: MiddlewareReply) -> None:
        """Send ``reply`` to ``inbox`` (never raises; a send that must wait goes on in a task)."""
        if not is_reply_inbox(inbox):  # allow_responses would let a requester aim the answer anywhere
            return
        try:
            data = encode(reply)
        except (TypeError, ValueError) as exc:  # a patch holding what JSON cannot carry: say so instead
            data = encode(MiddlewareReply(error=f"the reply cannot be encoded: {exc}"))
        limit = self.port.max_payload
        if len(data) > limit:  # the server would drop the connection for it: say so instead
            data = encode(
                MiddlewareReply(error=f"reply of {len(data)} bytes is over the server's max_payload ({limit})")
            )
        waiting = self.port.push_now(inbox, data)
        if waiting is not None:
            self._sending.start(waiting)
