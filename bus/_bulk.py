"""The Bus's second connection: event subscriptions, kept apart from the decisions.

A flood of events at wire speed can outrun a client: the server then cuts the
connection it fills as a slow consumer, and everything else on that socket is
lost until the reconnect. Event subscriptions (``Bus.subscribe``) therefore
read on a connection of their own, opened on the first subscription with the
same servers, user and options as the Bus's main one (the same permissions
apply to both: NATS grants them per user, not per connection). Intercepts,
their replies, turn requests and replies, the registry's watches and every
publish stay on the main connection, so a cut of the bulk one costs events
(counted as slow-consumer drops) and never a decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from bus._core.errors import TransportError
from bus._runtime.stats import BusStats
from bus._transport.port import Connection, Trouble

log = logging.getLogger("hookbus.bus")

#: What a Bus's bulk connection is named after its main one (``<name>:bulk``), as the server's /connz lists it.
BULK_SUFFIX: Final = ":bulk"

#: Opens a connection for the bulk line, given the callbacks it reports to.
Opener = Callable[["BulkLine"], Awaitable[Connection]]


class BulkLine:
    """The connection event subscriptions read on: opened on first use, closed with the Bus.

    ``shared`` (the in-process broker of :class:`bus.testing.TestBus`): the
    opener hands back the main connection itself, which this line never closes.
    """

    def __init__(self, stats: BusStats, opener: Opener, *, shared: bool = False) -> None:
        self.stats = stats
        self._opener = opener
        self._shared = shared
        self._lock = asyncio.Lock()
        self.conn: Connection | None = None
        #: Times the server cut this line (a slow consumer, a network fault) and it came back.
        self.cuts = 0
        self.reconnects = 0

    async def connection(self) -> Connection:
        """The bulk connection, opened now if it is not yet (ConnectError when it cannot be)."""
        conn = self.conn
        if conn is not None:
            return conn
        async with self._lock:
            if self.conn is None:
                self.conn = await self._opener(self)
            return self.conn

    async def flush(self, timeout: float) -> None:
        """Let what was sent on the line (its subscriptions) reach the server; nothing when it is not open."""
        conn = self.conn
        if conn is not None and conn.is_connected:
            with contextlib.suppress(TransportError, TimeoutError):
                await conn.flush(timeout)

    async def close(self, flush_timeout: float = 0.0) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not self._shared:
            await conn.close(flush_timeout=flush_timeout)

    # -- what the connection reports

    async def on_trouble(self, trouble: Trouble, exc: Exception) -> None:
        if trouble is Trouble.SLOW_CONSUMER:
            self.stats.dropped.add("slow_consumer")
        elif trouble is Trouble.DENIED:
            self.stats.dropped.add("denied")
            log.warning("the NATS server denied an event subscription: %s", str(exc).removeprefix("nats: "))
        else:
            log.debug("NATS trouble on the event subscriptions' connection: %r", exc)

    async def on_disconnect(self) -> None:
        if self.conn is not None:
            self.cuts += 1
            log.warning("the event subscriptions' NATS connection was cut; reconnecting (decisions are unaffected)")

    async def on_reconnect(self) -> None:
        self.reconnects += 1
        log.warning("the event subscriptions' NATS connection is back")
