"""The Bus's plumbing: the one object that holds its connection, handed to what runs under the façade.

:class:`Bus <bus._client.Bus>` keeps the user's verbs (emit, subscribe,
intercept, turns, lifecycle) and composes a :class:`BusPort`, reachable as
``bus.port``. The middleware kernel, module serving, the journal, turns,
subscriptions and the services take the port (as the
:class:`bus._transport.port.Port` protocol): raw publishes and subscriptions,
requests, inboxes, KV buckets, streams and consumers, the claim check's
store, event ids, the drop counters. It is hookbus's own seam, not part of the
public API: what it offers may change between releases.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any

from bus._core.claim import whole_payload
from bus._core.encoder import Encoder
from bus._core.envelope_schema import PayloadRefMsg
from bus._core.errors import BusClosedError, NotSent, PayloadRefError
from bus._runtime.stats import BusStats
from bus._transport.counters import CounterBucket
from bus._transport.kv import Bucket
from bus._transport.once import OnceBucket, once_bucket
from bus._transport.port import Connection, DirectHandler, ObjectStore, RawHandler, RawSubscription
from bus._transport.streams import PullConsumer, StreamMessage, StreamSpec, StreamState

#: How the port emits a checked event: the Bus's own ``emit``.
Emit = Callable[[str, Mapping[str, Any] | None, str | None], Awaitable[bool]]


class BusState(enum.Enum):
    """A Bus opens once and closes once; it is never reopened."""

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class BusPort:
    """One Bus's connection as the components under the façade use it (implements ``Port``).

    The Bus attaches the connection when it opens and detaches it when it
    closes; in between every call goes to that connection. A call without one
    raises BusClosedError, except the fast-path publishes, which count a drop.
    """

    def __init__(
        self,
        *,
        encoder: Encoder,
        stats: BusStats,
        max_depth: int,
        max_object_bytes: int,
        journal_origin: str | None,
        emit: Emit,
    ) -> None:
        self._encoder = encoder
        self._emit = emit
        self.stats = stats
        self.max_depth = max_depth
        self.max_object_bytes = max_object_bytes
        #: The NATS user the Bus journals as (see :attr:`bus._client.Bus.journal_origin`).
        self.journal_origin = journal_origin
        self.state = BusState.UNOPENED
        self.conn: Connection | None = None
        self.payloads: ObjectStore | None = None

    def connection(self) -> Connection:
        """The open connection; BusClosedError when there is none."""
        if self.conn is None:
            raise BusClosedError(f"Bus is {self.state.value}: no NATS connection")
        return self.conn

    def attach(self, conn: Connection) -> None:
        self.conn = conn

    def detach(self) -> Connection | None:
        """Forget the connection (and the object store reached through it), handing it back to close."""
        conn, self.conn, self.payloads = self.conn, None, None
        return conn

    @property
    def nc(self) -> Any:
        """The client underneath (nats-py's; the in-process broker's on a TestBus), for tests and tools.

        The way out for what the port does not offer (JetStream administration, raw NATS).
        """
        return self.connection().raw

    def jetstream(self) -> Any:
        """nats-py's JetStream context of this connection, for tests and tools."""
        return self.nc.jetstream()

    @property
    def connected(self) -> bool:
        return self.conn is not None and self.conn.is_connected

    @property
    def max_bytes(self) -> int:
        return self._encoder.max_bytes

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts (its ``max_payload``)."""
        return self.connection().max_payload

    def new_id(self) -> str:
        """A unique id (the one generator of event ids; middleware calls use it too)."""
        return self._encoder.new_id()

    def new_inbox(self) -> str:
        """A fresh reply subject under this connection's private inbox prefix."""
        return self.connection().new_inbox()

    def once_bucket(self, name: str, max_age_s: float) -> OnceBucket:
        """A write-once KV bucket on this connection (bus._transport.once: the asks are kept so)."""
        return once_bucket(self.connection().raw, name, max_age_s)

    def counter_bucket(self, name: str, max_age_s: float) -> CounterBucket:
        """A counter bucket on this connection (bus._transport.counters: the budgets' books are kept so)."""
        return CounterBucket(name, self.connection().raw, max_age_s)

    async def emit(self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None) -> bool:
        """:meth:`bus._client.Bus.emit` (the kernel's and the services' events go out as any other)."""
        return await self._emit(subject, payload, session_id)

    async def publish_raw(self, subject: str, data: bytes, reply: str = "") -> None:
        """Publish bytes as they are (plumbing, tools and tests; no envelope, no checks)."""
        await self.connection().publish(subject, data, reply)

    def push_now(self, subject: str, data: bytes, reply: str = "") -> Coroutine[Any, Any, None] | None:
        """:meth:`push` without a coroutine: None once the message is in the outgoing buffer (the common case),
        else an awaitable to await (the buffer is full, or the plain publish fallback). Drops are counted."""
        conn = self.conn
        if conn is None:
            self.stats.dropped.add("closed")
            return None
        try:
            waiting = conn.push(subject, data, reply)
        except NotSent:
            self.stats.dropped.add("disconnected")
            return None
        return None if waiting is None else self._wait_sent(waiting)

    async def _wait_sent(self, waiting: Awaitable[None]) -> None:
        try:
            await waiting
        except NotSent:
            self.stats.dropped.add("disconnected")

    async def push(self, subject: str, data: bytes, reply: str = "") -> None:
        """Publish bytes on the fast path (middleware requests, replies, journal entries; no envelope).

        Transport trouble drops the message (counted), as emit does.
        """
        conn = self.conn
        if conn is None:
            self.stats.dropped.add("closed")
            return
        try:
            waiting = conn.push(subject, data, reply)
            if waiting is not None:
                await waiting
        except NotSent:
            self.stats.dropped.add("disconnected")

    async def subscribe_raw(
        self, subject: str, cb: RawHandler, *, queue: str = "", pending_msgs_limit: int | None = None
    ) -> RawSubscription:
        """Call ``cb`` with each raw message on ``subject`` (turn and module requests; no envelope)."""
        return await self.connection().subscribe(subject, cb, queue=queue, pending_msgs_limit=pending_msgs_limit)

    async def subscribe_direct(self, subject: str, cb: DirectHandler, *, queue: str = "") -> RawSubscription:
        """Call ``cb`` as each raw message is read, with no queue or task between (the middleware's requests and
        replies). ``cb`` must not block; what it must wait for goes in a task (:func:`bus._runtime.eager.run_eager`)."""
        return await self.connection().subscribe_direct(subject, cb, queue=queue)

    async def request_raw(self, subject: str, data: bytes, timeout: float) -> bytes:
        """Send a raw request and return the reply's bytes (status queries; no envelope).

        Raises NoResponders when nobody listens on ``subject``, RequestTimeout when no reply comes.
        """
        return await self.connection().request(subject, data, timeout)

    async def flush(self, timeout: float = 5.0) -> None:
        """:meth:`bus._client.Bus.flush`: the server has processed everything sent so far."""
        await self.connection().flush(timeout)

    async def open_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Bind to a KV bucket, creating it on first use; RegistryError when JetStream is off or denies it."""
        return await self.connection().open_bucket(name, ttl_s)

    async def ensure_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Open a KV bucket, creating it or bringing an older one to hookbus's config (``hookbus up``): no
        rollup headers, no purges, so no writer erases what others put; RegistryError if refused."""
        return await self.connection().ensure_bucket(name, ttl_s)

    async def ensure_stream(self, spec: StreamSpec) -> StreamState:
        """Create (or update) a JetStream stream; JournalError if the server refuses."""
        return await self.connection().ensure_stream(spec)

    async def stream_state(self, name: str) -> StreamState | None:
        """A JetStream stream's state, None if it does not exist; JournalError if the server does not answer."""
        return await self.connection().stream_state(name)

    async def pull_consumer(
        self, stream: str, subject: str, durable: str, *, ack_wait_s: float, max_ack_pending: int
    ) -> PullConsumer:
        """Bind to (or create) a durable pull consumer with explicit acks (the journal sink's)."""
        return await self.connection().pull_consumer(
            stream, subject, durable, ack_wait_s=ack_wait_s, max_ack_pending=max_ack_pending
        )

    def read_since(self, stream: str, since: datetime) -> AsyncIterator[StreamMessage]:
        """A stream's messages from ``since`` on, oldest first (``hookbus history``); JournalError if refused."""
        return self.connection().read_since(stream, since)

    async def load_payload(self, subject: str, ref: PayloadRefMsg) -> dict[str, Any]:
        """The whole payload a received event refers to (``Event.full_payload`` calls this), checked.

        Raises PayloadRefError when the reference is refused (another bucket, over
        ``max_object_bytes``) or the object is missing or not what it names.
        """
        store = self.payloads
        if store is None:
            raise PayloadRefError(subject, f"the Bus is {self.state.value}: nothing to fetch the payload with")
        return whole_payload(subject, await store.fetch(subject, ref))

    async def ensure_payloads_bucket(self) -> None:
        """Create the claim check's object store if missing (``hookbus up``); RegistryError if refused."""
        await self.connection().ensure_payloads_bucket()
