"""Python subscribers: workers written as decorated async functions.

::

    from subscribers import Subscriber

    app = Subscriber("audit", queue="audit", concurrency=8)

    @app.on("prx.lifecycle.tool_call")
    async def audit(event, bus):
        if not event.payload.get("success"):
            await bus.emit("eva.custom.tool_failed", {"tool": event.payload.get("tool")})

    await app.serve("nats://127.0.0.1:4222")   # until cancelled; Ctrl-C drains in-flight work

A handler gets the decoded :class:`bus.Event` and the :class:`bus.Bus`; what it
emits carries the event's depth + 1 (the bus sets it for handlers), so loops
stop at the recursion limit. Subscribers with the same ``queue`` share the
events: each handler subscribes in a queue group of its own within ``queue``
(:func:`bus._core.subjects.key_queue` of its pattern and name), so an event
matching several handlers reaches each of them once across the members, never
just one of them. Handlers run at most ``concurrency`` at a time per pattern;
``stop()`` stops taking events and lets in-flight handlers finish within
``drain_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from bus._client import DEFAULT_CONCURRENCY, Bus, Subscription
from bus._core.envelope import Event
from bus._core.subjects import key_queue, normalise_pattern

#: A Subscriber's handler: like an EventHandler, also given the Bus (to emit, intercept, request turns).
SubscriberHandler = Callable[[Event, Bus], Awaitable[None]]

DEFAULT_DRAIN_TIMEOUT: Final = 5.0


@dataclass(frozen=True, slots=True)
class Route:
    """One handler and the pattern it listens to."""

    pattern: str
    handler: SubscriberHandler

    @property
    def key(self) -> str:
        """What names this route in every member: its NATS pattern and the handler's module and name."""
        name = getattr(self.handler, "__qualname__", None) or repr(self.handler)
        return f"{normalise_pattern(self.pattern)} {getattr(self.handler, '__module__', '')}.{name}"


class Subscriber:
    """A set of handlers run together: one queue namespace, bounded concurrency, graceful stop."""

    def __init__(
        self,
        name: str,
        *,
        queue: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.name = name
        self.queue = queue
        self.concurrency = concurrency
        self.drain_timeout = drain_timeout
        self.routes: list[Route] = []
        self._subs: list[Subscription] = []

    def on(self, pattern: str) -> Callable[[SubscriberHandler], SubscriberHandler]:
        """Decorate an async ``handler(event, bus)`` to run for events matching ``pattern``."""
        normalise_pattern(pattern)  # a bad pattern fails at import time, not at start

        def decorate(handler: SubscriberHandler) -> SubscriberHandler:
            if not asyncio.iscoroutinefunction(handler):
                raise TypeError(f"{handler!r} must be an async function")
            self.routes.append(Route(pattern, handler))
            return handler

        return decorate

    async def start(self, bus: Bus) -> None:
        """Subscribe every route on ``bus`` (an open Bus); events published after this returns reach them."""
        for route, queue in zip(self.routes, self.queues(), strict=True):
            self._subs.append(
                await bus.subscribe(route.pattern, _bind(route.handler, bus), queue, concurrency=self.concurrency)
            )
        await bus.flush()  # the server has the subscriptions when start() returns

    def queues(self) -> list[str | None]:
        """Each route's queue group: its own within ``queue`` (None without one).

        A route whose key repeats (the same handler twice on one pattern) gets
        its rank among them in the key, so each still runs once per event.
        """
        if not self.queue:
            return [None] * len(self.routes)
        seen: Counter[str] = Counter()
        queues: list[str | None] = []
        for route in self.routes:
            key = route.key
            seen[key] += 1
            queues.append(key_queue(self.queue, key if seen[key] == 1 else f"{key} #{seen[key]}"))
        return queues

    async def stop(self) -> None:
        """Stop taking events; in-flight handlers get ``drain_timeout`` seconds, then are cancelled."""
        subs, self._subs = self._subs, []
        await asyncio.gather(*(sub.unsubscribe(self.drain_timeout) for sub in subs))

    async def serve(self, servers: str | list[str] | None = None) -> None:
        """Connect, run until cancelled (or Ctrl-C), then stop gracefully."""
        async with Bus(servers, name=f"hookbus-sub-{self.name}", close_timeout=self.drain_timeout) as bus:
            await self.start(bus)
            try:
                await asyncio.Event().wait()
            finally:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self.stop())


def _bind(handler: SubscriberHandler, bus: Bus) -> Callable[[Event], Awaitable[None]]:
    async def call(event: Event) -> None:
        await handler(event, bus)

    call.__qualname__ = getattr(handler, "__qualname__", repr(handler))
    return call
