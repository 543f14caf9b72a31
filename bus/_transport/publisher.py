"""Publishing envelope bytes with as little work per message as possible.

nats-py's ``publish`` re-checks what hookbus already guarantees (subject shape,
size) and goes through three coroutine layers per message; on the agent's hot
path that costs as much as building the envelope. When connected, this module
builds the ``PUB`` command itself and hands it to the client's outgoing buffer
the way ``publish`` ends (append to the pending buffer, kick the flusher), so buffering, flow
control and flushing stay nats-py's. It is used only within the tested
nats-py versions and while the switch is on (:mod:`bus._transport.internals`),
and checked against the installed client when a Bus connects (and by the test
suite); if the internals it needs are missing, or while disconnected, it falls
back to ``publish``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Final

import nats.errors
from nats.aio.client import Client

from bus._core.errors import NotSent
from bus._transport.internals import internals_enabled

_CONNECTED: Final = Client.CONNECTED
_CRLF: Final = b"\r\n"
_NEEDED: Final = (
    "_status",
    "_transport",
    "_pending",
    "_pending_data_size",
    "_max_pending_size",
    "_flush_queue",
    "_flush_pending",
    "_flusher_task",
)
#: Subjects, and message lengths per subject, whose PUB line is kept ready.
#: One buffer per message, as nats-py's publish makes it, from Python 3.12: there the transport writes the
#: pending list with sendmsg, one iovec per item, and three small items per message cost nearly three times
#: the calls and bookkeeping of one. Python 3.11 joins the list itself: three appends cost less than a join.
_ONE_BUFFER: Final = sys.version_info >= (3, 12)
_CACHED_SUBJECTS: Final = 4096
_CACHED_SIZES: Final = 1024
#: Buffered bytes at which the fast path hands the buffer to the socket and waits for it (while connected);
#: the client's ``pending_size`` (8 MiB, see bus._transport.connection) stays the bound of what a
#: disconnected client keeps. Fresh envelopes held until a flush must stay in the CPU's caches: emit
#: measured (bench/bench_core.py, CPU time) about 0.87 of raw nats-py handing over 2 MiB at a time
#: (nats-py's default), 0.97 to 1.07 at 384 to 768 KiB, 0.94 at 256 KiB (more waits for the socket).
FLUSH_AT_BYTES: Final = 512 * 1024


def fast_path_available(nc: Client) -> bool:
    """Whether the fast path may run: internals switched on, a tested nats-py, and the attributes it uses there."""
    return internals_enabled() and all(hasattr(nc, name) for name in _NEEDED)


class Publisher:
    """Publishes pre-encoded event bytes on one nats-py client."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self.fast = fast_path_available(nc)
        #: Per subject, the PUB line for each message length seen (events of one kind repeat their lengths).
        self._headers: dict[str, dict[int, bytes]] = {}
        self._flush_at = min(FLUSH_AT_BYTES, nc._max_pending_size) if self.fast else 0
        #: What the flusher is handed to wake it: a future it would resolve, already resolved (nobody waits on it).
        self._kick: asyncio.Future[None] | None = None

    def push(self, subject: str, data: bytes, reply: str = "") -> Awaitable[None] | None:
        """Publish ``data`` on a subject that bus._core.subjects has validated (``reply``: an inbox, for requests).

        Returns None when the message is in the outgoing buffer (and the
        flusher woken), or an awaitable the caller must await (a full buffer
        to hand over, or the plain publish fallback, which raises NotSent when
        the client does not take the message), so the common case costs no coroutine.
        """
        nc = self._nc
        if not self.fast or nc._status != _CONNECTED:
            return self.publish(subject, data, reply)
        size = len(data)
        if reply:
            header = b"PUB %s %s %d\r\n" % (subject.encode(), reply.encode(), size)
        else:
            headers = self._headers.get(subject)
            if headers is None:
                if len(self._headers) >= _CACHED_SUBJECTS:
                    self._headers.clear()
                headers = self._headers[subject] = {}
            cached = headers.get(size)
            if cached is None:
                if len(headers) >= _CACHED_SIZES:
                    headers.clear()
                cached = headers[size] = b"PUB %s %d\r\n" % (subject.encode(), size)
            header = cached
        # Three chunks instead of one joined command: the payload is not copied
        # here, the transport's writelines joins the buffer once per flush.
        if _ONE_BUFFER:
            command = b"".join((header, data, _CRLF))
            nc._pending.append(command)
            nc._pending_data_size += len(command)
        else:
            pending = nc._pending
            pending.append(header)
            pending.append(data)
            pending.append(_CRLF)
            nc._pending_data_size += len(header) + size + 2
        if nc._pending_data_size > self._flush_at:
            return nc._flush_pending(force_flush=True)
        queue = nc._flush_queue
        if queue is not None and queue.empty():
            flusher = nc._flusher_task
            if flusher is None or flusher.done():
                return nc._flush_pending()  # it writes inline when its flusher is gone
            # What _flush_pending does, without a coroutine: hand the flusher a future (an empty queue has room).
            kick = self._kick
            if kick is None:
                kick = self._kick = asyncio.get_running_loop().create_future()
                kick.set_result(None)
            queue.put_nowait(kick)
        return None

    async def publish(self, subject: str, data: bytes, reply: str = "") -> None:
        """nats-py's own ``publish``, its failures as NotSent (the drop label as ``reason``)."""
        try:
            await self._nc.publish(subject, data, reply=reply)
        except nats.errors.Error as exc:
            raise not_sent(exc) from None


def not_sent(exc: nats.errors.Error) -> NotSent:
    """A nats-py publish or subscribe failure as hookbus's NotSent."""
    if isinstance(exc, nats.errors.ConnectionClosedError | nats.errors.ConnectionDrainingError):
        return NotSent("closed", type(exc).__name__)
    if isinstance(exc, nats.errors.MaxPayloadError):
        return NotSent("oversize", type(exc).__name__)
    return NotSent("disconnected", type(exc).__name__)


async def ordered_flush(nc: Client, timeout: float) -> None:
    """Return once the server has processed everything this client queued before the call.

    nats-py 2.x's ``flush`` writes its ``PING`` straight to the transport while
    ``SUB`` and ``PUB`` commands wait in the pending buffer for the flusher task,
    so the ``PONG`` can come back before the server has seen them. Here the
    pending buffer is handed to the transport first, then the ping goes out
    behind it. Without the internals this needs, two plain flushes do the same:
    the first one's flusher run writes the buffer before its ``PONG`` can arrive.
    Raises nats.errors.TimeoutError (a FlushTimeoutError) when no ``PONG`` comes.
    """
    whole = max(1, int(timeout))  # nats-py takes whole seconds here
    transport = nc._transport if fast_path_available(nc) else None
    if transport is None:
        await nc.flush(timeout=whole)
        await nc.flush(timeout=whole)
        return
    if nc._status == _CONNECTED and nc._pending_data_size > 0:
        transport.writelines(nc._pending[:])
        nc._pending = []
        nc._pending_data_size = 0
    await nc.flush(timeout=whole)


async def flush_quietly(nc: Client, timeout: float) -> bool:
    """``ordered_flush`` that reports trouble as False instead of raising (closing paths)."""
    try:
        await asyncio.wait_for(ordered_flush(nc, timeout), timeout=timeout + 1)
    except (TimeoutError, nats.errors.Error):
        return False
    return True
