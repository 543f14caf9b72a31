"""The seam between the bus façade and the components under it.

:class:`Port` is what the middleware kernel, the handler side, the journal
publisher and the turn server need of a connection: publish (checked or on
the fast path, or raw), raw subscriptions, flush, fresh ids and inboxes, KV
buckets, the receive limits and the drop counters. None of it is a nats-py type
beyond the raw message a raw subscription delivers.
``Bus`` implements it; the components take a Port, never ``Bus`` itself, so
they sit below the façade and can be driven by any implementation of it.

:class:`Connection` is what the façade itself needs of a client: nats-py's
behind :class:`~bus._transport.nats_connection.NatsConnection`, the in-process
broker's behind :class:`bus.testing.TestBus`. :class:`Trouble` classifies what
a connection's error callback reports.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

import nats.errors as nats_errors

from bus._core.envelope_schema import PayloadRefMsg
from bus._core.errors import TransportError
from bus._runtime.stats import BusStats
from bus._transport.kv import Bucket
from bus._transport.once import OnceBucket
from bus._transport.streams import PullConsumer, StreamMessage, StreamSpec, StreamState

#: What a publish, subscribe or unsubscribe on a Port may raise when the connection fails
#: (catch this, not nats-py's types; KV and stream calls raise hookbus errors instead).
TRANSPORT_FAILURES: tuple[type[Exception], ...] = (TransportError, nats_errors.Error)


class Trouble(enum.Enum):
    """What kind of trouble a connection's error callback reports."""

    SLOW_CONSUMER = "slow_consumer"
    CONNECTION = "connection"
    DENIED = "denied"
    OTHER = "other"


#: Hears each trouble a connection reports, with the error itself.
TroubleCallback = Callable[[Trouble, Exception], Awaitable[None]]


class RawMessage(Protocol):
    """A message as a raw subscription delivers it (nats-py's message satisfies it as it is)."""

    @property
    def subject(self) -> str: ...

    @property
    def reply(self) -> str: ...

    @property
    def data(self) -> bytes: ...

    @property
    def headers(self) -> dict[str, str] | None: ...


#: What a raw subscription calls with each message.
RawHandler = Callable[[RawMessage], Awaitable[None]]
#: What a direct subscription calls as each message is read: plain, never blocking.
DirectHandler = Callable[[RawMessage], None]


class RawSubscription(Protocol):
    """What subscribing returns: a handle to stop receiving (raises one of TRANSPORT_FAILURES when cut off)."""

    async def unsubscribe(self, limit: int = 0) -> None: ...

    async def drain(self) -> None:
        """Stop receiving, but first hand the callback every message already sent to it (unsubscribe drops them)."""
        ...


async def unsubscribe_all(subs: Iterable[RawSubscription]) -> None:
    """Unsubscribe each of ``subs``, closing: a cut connection has nothing left to unsubscribe, so that is no error."""
    for sub in subs:
        with contextlib.suppress(*TRANSPORT_FAILURES):
            await sub.unsubscribe()


class ObjectStore(Protocol):
    """The claim check's object store (``hookbus_payloads``) as a connection offers it."""

    async def put(self, body: bytes) -> PayloadRefMsg | None:
        """Keep ``body`` (a payload's JSON bytes) whole; its reference, or None (never raises) to cut the event."""
        ...

    async def fetch(self, subject: str, ref: PayloadRefMsg) -> bytes:
        """The bytes ``ref`` names, checked against it; PayloadRefError when refused, missing or not the same."""
        ...


class Connection(Protocol):
    """A client as the façade uses it; failures come out as hookbus errors (NotSent, NoResponders, ...)."""

    @property
    def raw(self) -> Any:
        """The client underneath, for tests and tools."""
        ...

    @property
    def is_connected(self) -> bool: ...

    @property
    def max_payload(self) -> int: ...

    @property
    def server(self) -> str:
        """Where it is connected now (host:port), for logs."""
        ...

    def push(self, subject: str, data: bytes, reply: str = "") -> Awaitable[None] | None:
        """Publish on the fast path; an awaitable when the caller must wait (buffer full); NotSent when dropped."""
        ...

    async def publish(self, subject: str, data: bytes, reply: str = "") -> None: ...

    async def subscribe(
        self, subject: str, cb: RawHandler, *, queue: str = "", pending_msgs_limit: int | None = None
    ) -> RawSubscription: ...

    async def subscribe_direct(self, subject: str, cb: DirectHandler, *, queue: str = "") -> RawSubscription:
        """Call ``cb`` (plain, never blocking) as each message is read: no queue, no task per message."""
        ...

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes: ...

    def new_inbox(self) -> str: ...

    async def flush(self, timeout: float) -> None: ...

    async def close(self, flush_timeout: float = 0.0) -> bool:
        """Close (flushing first within ``flush_timeout``); False if the flush did not complete."""
        ...

    async def open_bucket(self, name: str, ttl_s: float | None = None) -> Bucket: ...

    async def ensure_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Open a KV bucket, creating it or bringing an older one to hookbus's config (no rollup, no purge)."""
        ...

    async def ensure_stream(self, spec: StreamSpec) -> StreamState: ...

    async def stream_state(self, name: str) -> StreamState | None: ...

    async def pull_consumer(
        self, stream: str, subject: str, durable: str, *, ack_wait_s: float, max_ack_pending: int
    ) -> PullConsumer: ...

    def read_since(self, stream: str, since: datetime) -> AsyncIterator[StreamMessage]:
        """A stream's messages stored at or after ``since``, oldest first; JournalError if the server refuses."""
        ...

    def payload_store(self, max_object_bytes: int) -> ObjectStore:
        """The claim check's object store, keeping and fetching objects of at most ``max_object_bytes``."""
        ...

    async def ensure_payloads_bucket(self) -> None:
        """Create the claim check's object store if missing; RegistryError if refused."""
        ...


class Port(Protocol):
    """A bus connection as the components under the façade see it."""

    async def open_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Bind to a KV bucket, creating it on first use; RegistryError when JetStream is off or denies it."""
        ...

    async def ensure_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Open a KV bucket, creating it or bringing an older one to hookbus's config (no rollup, no purge)."""
        ...

    def new_inbox(self) -> str: ...

    def once_bucket(self, name: str, max_age_s: float) -> OnceBucket:
        """A write-once KV bucket (bus._transport.once), made on the first write that needs it."""
        ...

    async def load_payload(self, subject: str, ref: PayloadRefMsg) -> dict[str, Any]:
        """The whole payload a claimed event refers to, checked; PayloadRefError if refused or not what it names."""
        ...

    async def ensure_payloads_bucket(self) -> None:
        """Create the claim check's object store if missing; RegistryError if refused."""
        ...

    async def ensure_stream(self, spec: StreamSpec) -> StreamState:
        """Create (or update) a JetStream stream; JournalError if the server refuses."""
        ...

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (``stats.reconnects`` counts how often it came back)."""
        ...

    @property
    def max_bytes(self) -> int: ...

    max_depth: int
    journal_origin: str | None
    stats: BusStats

    async def emit(
        self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None
    ) -> bool: ...

    async def push(self, subject: str, data: bytes, reply: str = "") -> None: ...

    def push_now(self, subject: str, data: bytes, reply: str = "") -> Coroutine[Any, Any, None] | None:
        """``push`` without a coroutine: None once buffered, else an awaitable to await (never raises)."""
        ...

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts."""
        ...

    async def publish_raw(self, subject: str, data: bytes, reply: str = "") -> None: ...

    async def subscribe_raw(
        self, subject: str, cb: RawHandler, *, queue: str = "", pending_msgs_limit: int | None = None
    ) -> RawSubscription: ...

    async def subscribe_direct(self, subject: str, cb: DirectHandler, *, queue: str = "") -> RawSubscription:
        """Call ``cb`` (plain, never blocking) as each message is read (the middleware's request/reply path)."""
        ...

    async def request_raw(self, subject: str, data: bytes, timeout: float) -> bytes:
        """A raw request's reply; NoResponders when nobody listens, RequestTimeout when no reply comes."""
        ...

    async def flush(self, timeout: float = 5.0) -> None: ...

    def new_id(self) -> str: ...
