"""Direct subscriptions: each message handed to a plain callback by the connection's reader, no queue, no task.

A nats-py subscription with a callback puts every message in a queue that a
task of its own reads: one more turn of the event loop per message before the
callback runs. On the middleware's request/reply path that turn is on the
critical path twice (the module receiving a request, the kernel receiving the
reply). A direct subscription makes the subscription's pending queue a stand-in
(:class:`DirectQueue`) whose ``put_nowait`` calls the callback at once, from
the reader that parsed the message.

The callback must not block (it holds up every subscription of the
connection) and should not raise (a raise is logged and the message dropped).
Handlers it starts run inline until they wait (bus._runtime.eager), then in tasks.

It relies on how nats-py delivers a message (``sub._pending_queue.put_nowait``
in ``Client._process_msg``, pending bytes counted in ``sub._pending_size``):
used only within the tested nats-py versions and while the switch is on
(:mod:`bus._transport.internals`); otherwise the callback runs from an ordinary
subscription's task, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription

from bus._transport.internals import internals_enabled
from bus._transport.publisher import flush_quietly

log = logging.getLogger("hookbus.transport")

#: Called with each raw message of a direct subscription (the raw message: subject, reply, data, headers).
DirectCallback = Callable[[Any], None]
_NEEDED = ("_pending_queue", "_pending_size")
#: How long a drain waits for the server to confirm its UNSUB (the caller bounds the whole drain too).
DRAIN_FLUSH_S = 2.0


def direct_available(sub: Subscription) -> bool:
    """Whether ``sub``'s queue can be stood in for: internals on, a tested nats-py, the attributes it uses."""
    return internals_enabled() and all(hasattr(sub, name) for name in _NEEDED)


class DirectQueue:
    """Stands in for a subscription's pending queue: each message goes to the callback as it is put."""

    __slots__ = ("_cb", "_nc", "_sub")

    def __init__(self, nc: Client, sub: Subscription, cb: DirectCallback) -> None:
        self._nc = nc
        self._sub = sub
        self._cb = cb

    def put_nowait(self, msg: Any) -> None:
        self._sub._pending_size -= len(msg.data)  # counted as pending by the client: it never waits here
        try:
            self._cb(msg)
        except (Exception, asyncio.CancelledError):  # the reader goes on: one message never stops the connection
            log.exception("a direct subscription's callback raised on %s; message dropped", msg.subject)

    # What the client and Subscription ask of a queue (drain, unsubscribe, pending counts): never anything pending.
    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True

    def full(self) -> bool:
        return False

    def task_done(self) -> None:
        return None

    async def join(self) -> None:
        """What ``drain`` waits for after its UNSUB: every message the server routed here handed over.

        nats-py's drain queues the UNSUB in the outgoing buffer but writes its
        PING straight to the socket, so its PONG can come back before the server
        has seen the UNSUB; the messages it routes here meanwhile would arrive
        after the subscription is removed, and be dropped (a module stopping in a
        hot swap would lose requests). Here the buffer goes out first, then a
        ping: once its PONG is read, everything sent before the UNSUB has been
        read too, and handed to the callback by the reader."""
        await flush_quietly(self._nc, DRAIN_FLUSH_S)


async def subscribe_direct(nc: Client, subject: str, cb: DirectCallback, queue: str = "") -> Subscription:
    """Subscribe with ``cb`` called from the reader (or, without the internals, from the subscription's task)."""
    probe = Subscription(nc)
    if not direct_available(probe):

        async def in_task(msg: Any) -> None:
            cb(msg)

        return await nc.subscribe(subject, queue=queue, cb=in_task)
    sub = await nc.subscribe(subject, queue=queue, pending_bytes_limit=0)  # no limit: nothing waits in it
    queued = sub._pending_queue
    stand_in = DirectQueue(nc, sub, cb)
    sub._pending_queue = stand_in  # type: ignore[assignment]
    while not queued.empty():  # anything the reader delivered while subscribing goes first, in order
        stand_in.put_nowait(queued.get_nowait())
    return sub
