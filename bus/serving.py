"""Serving a Module: the request subscription, the announcement heartbeat, a bounded shutdown."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Final

import nats.errors
import orjson
from nats.aio.msg import Msg

from bus.eager import start_eager
from bus.errors import RegistryError
from bus.registry import MODULES_BUCKET, announcement_of, open_bucket

if TYPE_CHECKING:
    from bus.client import Bus
    from bus.module import Module

log = logging.getLogger("hookbus.module")

#: How long a stopping module lets its in-flight handlers finish before cancelling them.
STOP_GRACE: Final = 2.0
#: Requests from agents queued while every slot is busy; beyond this they are dropped (the kernel's
#: timeout then applies the fail mode).
MAX_WAITING: Final = 10_000


class ModuleServer:
    """Runs one Module on one Bus until cancelled."""

    def __init__(self, module: Module, bus: Bus) -> None:
        self.module = module
        self.bus = bus
        self.announcement = announcement_of(module)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._waiting: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()

    async def run(self, ready: asyncio.Event | None = None) -> None:
        nc = self.bus.nc
        kv = await open_bucket(nc, MODULES_BUCKET)
        subject = self.announcement.subject
        sub = await nc.subscribe(subject, queue=subject, cb=self._on_msg, pending_msgs_limit=100_000)
        await nc.flush()
        key, data = self.announcement.key, self.announcement.to_bytes()
        try:
            await kv.put(key, data)
            log.info("module %s serving on %s (instance %s)", self.module.name, subject, self.announcement.instance)
            if ready is not None:
                ready.set()
            while True:
                await asyncio.sleep(self.module.heartbeat)
                await self._beat(kv, key)
        finally:
            await self._stop(sub, kv, key)

    async def _beat(self, kv: Any, key: str) -> None:
        try:
            await kv.put(key, self.announcement.to_bytes())
        except (nats.errors.Error, RegistryError) as exc:
            log.warning("module %s: heartbeat failed (%s); retrying", self.module.name, exc)

    async def _stop(self, sub: Any, kv: Any, key: str) -> None:
        with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
            await asyncio.wait_for(kv.delete(key), STOP_GRACE)
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=STOP_GRACE)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("module %s: %d requests still running at stop: cancelled", self.module.name, len(pending))

    async def _on_msg(self, msg: Msg) -> None:
        try:
            request = orjson.loads(msg.data)
            if not isinstance(request, dict):
                raise TypeError("the request is not a JSON object")
            nested = _depth_of(request) > 0
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            await self._reply(msg.reply, {"error": f"malformed request: {exc}"})
            return
        # Only calls from an agent (depth 0) wait for a slot, in a queue of our own (never by
        # blocking this callback: the calls behind it would wait too). A call made while handling
        # one (A -> B -> A) is always admitted, or full slots would wait on each other for ever.
        if nested or len(self._tasks) < self.module.concurrency:
            self._start(msg.reply, request)
        elif len(self._waiting) < MAX_WAITING:
            self._waiting.append((msg.reply, request))
        else:
            log.warning("module %s: %d requests waiting; one dropped", self.module.name, len(self._waiting))

    def _start(self, inbox: str, request: dict[str, Any]) -> None:
        try:
            task = start_eager(self._answer(inbox, request))  # most answers never wait: no task for them
        except Exception:
            log.exception("module %s: answering a request failed", self.module.name)
            return
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        while self._waiting and len(self._tasks) < self.module.concurrency:
            self._start(*self._waiting.popleft())

    async def _answer(self, inbox: str, request: dict[str, Any]) -> None:
        try:
            reply = await self.module.handle(request, self.bus)
        except (TypeError, ValueError) as exc:
            reply = {"error": f"malformed request: {exc}"}
        await self._reply(inbox, reply)

    async def _reply(self, inbox: str, reply: dict[str, Any]) -> None:
        if not inbox:
            return
        data = orjson.dumps(reply)
        limit = self.bus.nc.max_payload
        if len(data) > limit:  # the server would drop the connection for it: say so instead
            data = orjson.dumps({"error": f"reply of {len(data)} bytes is over the server's max_payload ({limit})"})
        await self.bus.push(inbox, data)


def _depth_of(request: dict[str, Any]) -> int:
    ctx = request.get("ctx")
    depth = ctx.get("depth", 0) if isinstance(ctx, dict) else 0
    return depth if isinstance(depth, int) else 0
