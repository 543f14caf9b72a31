"""Request/reply for the kernel side, with every pending request reachable.

Like nats-py's ``request`` (one wildcard subscription under the connection's
private inbox prefix, a random token and a future per request) but with one
sweeping timer for every pending request's deadline instead of
``asyncio.wait_for`` (which costs a task per call on Python 3.11) or a timer
per request, replies taken straight from the reader (a direct subscription, see
:mod:`bus._transport.direct`: no task turn before the waiting caller is woken),
and with :meth:`Requester.abort_all` so that a closing Bus can end every
pending request at once instead of hanging on them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from bus._core.clock import RandomTokens
from bus._core.errors import Aborted, NoResponders, RequestTimeout
from bus._transport.port import Port, RawMessage

_STATUS: Final = "Status"
#: How often pending requests' deadlines are checked while any is pending: a request times out at most
#: this late (its timeout, within this much).
SWEEP_S: Final = 0.05
_NO_RESPONDERS: Final = "503"


class Requester:
    """Sends requests on one connection and routes replies back by token; publishes on its fast path."""

    def __init__(self, port: Port) -> None:
        self._port = port
        self._push = port.push_now
        self._prefix = ""
        self._token = RandomTokens()
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        self._deadlines: dict[str, float] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        self._prefix = self._port.new_inbox() + "."
        await self._port.subscribe_direct(self._prefix + "*", self._on_reply)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _on_reply(self, msg: RawMessage) -> None:
        future = self._pending.get(msg.subject[len(self._prefix) :])
        if future is None or future.done():
            return
        headers = msg.headers
        if headers and headers.get(_STATUS) == _NO_RESPONDERS and not msg.data:
            future.set_exception(NoResponders())
        else:
            future.set_result(msg.data)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        """Send ``data`` to ``subject``; return the reply's bytes.

        Raises NoResponders, RequestTimeout or Aborted.
        """
        token = self._token()  # unpredictable: nobody can aim a forged reply at the next request
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        pending = self._pending
        pending[token] = future
        self._deadlines[token] = loop.time() + timeout
        self._idle.clear()
        if self._sweeper is None:
            self._sweeper = loop.call_later(SWEEP_S, self._sweep)
        try:
            waiting = self._push(subject, data, self._prefix + token)
            if waiting is not None:
                await waiting
            return await future
        finally:
            del pending[token]
            del self._deadlines[token]
            if not pending:
                self._idle.set()

    def _sweep(self) -> None:
        """Fail every pending request past its deadline with RequestTimeout; look again while any is pending."""
        self._sweeper = None
        if not self._pending:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for token, deadline in self._deadlines.items():
            if deadline <= now:
                future = self._pending[token]
                if not future.done():
                    future.set_exception(RequestTimeout())
        self._sweeper = loop.call_later(SWEEP_S, self._sweep)

    async def wait_idle(self, within: float) -> None:
        """Wait until no request is pending, for at most ``within`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._idle.wait()

    def abort_all(self) -> int:
        """Fail every pending request with Aborted; return how many there were."""
        count = 0
        for future in self._pending.values():
            if not future.done():
                future.set_exception(Aborted())
                count += 1
        return count
