"""The seam between the bus façade and the components under it.

:class:`Port` is what the middleware kernel, the handler side, the journal
publisher and the turn server need of a connection: publish (checked or on
the fast path, or raw), raw subscriptions, flush, fresh ids and inboxes, KV
buckets, the receive limits and the drop counters. None of it is a nats-py type
beyond the raw message a raw subscription delivers.
``Bus`` implements it; the components take a Port, never ``Bus`` itself, so
they sit below the façade and can be driven by any implementation of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from bus.core.stats import BusStats
from bus.transport.kv import Bucket
from bus.transport.nats_api import nats_errors
from bus.transport.streams import StreamSpec, StreamState

#: What a publish, subscribe or unsubscribe on a Port may raise when the connection fails
#: (catch this, not nats-py's types; KV and stream calls raise hookbus errors instead).
TRANSPORT_FAILURES: tuple[type[Exception], ...] = (nats_errors.Error,)


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


class RawSubscription(Protocol):
    """What subscribing returns: a handle to stop receiving (raises one of TRANSPORT_FAILURES when cut off)."""

    async def unsubscribe(self, limit: int = 0) -> None: ...


class Port(Protocol):
    """A bus connection as the components under the façade see it."""

    async def open_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Bind to a KV bucket, creating it on first use; RegistryError when JetStream is off or denies it."""
        ...

    def new_inbox(self) -> str: ...

    async def ensure_stream(self, spec: StreamSpec) -> StreamState:
        """Create (or update) a JetStream stream; JournalError if the server refuses."""
        ...

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (``stats.reconnects`` counts how often it came back)."""
        ...

    @property
    def max_bytes(self) -> int: ...

    @property
    def max_depth(self) -> int: ...

    @property
    def journal_origin(self) -> str | None: ...

    @property
    def stats(self) -> BusStats: ...

    async def emit(
        self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None
    ) -> bool: ...

    async def push(self, subject: str, data: bytes, reply: str = "") -> None: ...

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts."""
        ...

    async def publish_raw(self, subject: str, data: bytes, reply: str = "") -> None: ...

    async def subscribe_raw(
        self,
        subject: str,
        cb: Callable[[RawMessage], Awaitable[None]],
        *,
        queue: str = "",
        pending_msgs_limit: int | None = None,
    ) -> RawSubscription: ...

    async def flush(self, timeout: float = 5.0) -> None: ...

    def new_id(self) -> str: ...
