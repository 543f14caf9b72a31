"""The façade's connection on nats-py: a :class:`~bus._transport.port.Connection` with hookbus types and errors.

It is the publisher (the fast path of :mod:`bus._transport.publisher`, so
``push`` costs no extra call) plus the rest of what ``Bus`` does with a
client: subscriptions, requests, the ordered flush, close, JetStream KV,
streams and the claim check's object store. nats-py's failures come out as hookbus errors, and the trouble its
error callback reports is classified (:class:`~bus._transport.port.Trouble`)
before the façade hears of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import nats.errors as nats_errors
from nats.aio.client import Client

from bus._core.errors import NoResponders, RequestTimeout
from bus._transport.connection import open_connection
from bus._transport.direct import subscribe_direct
from bus._transport.kv import Bucket, bind_bucket, ensure_bucket
from bus._transport.objects import PayloadStore, ensure_payloads_bucket
from bus._transport.port import (
    DirectHandler,
    ObjectStore,
    RawHandler,
    RawSubscription,
    Trouble,
    TroubleCallback,
)
from bus._transport.publisher import Publisher, flush_quietly, not_sent, ordered_flush
from bus._transport.streams import (
    PullConsumer,
    StreamMessage,
    StreamSpec,
    StreamState,
    ensure_stream,
    open_pull_consumer,
    read_since,
    stream_state,
)


def classify(exc: Exception) -> Trouble:
    """What kind of trouble an error nats-py reported to its error callback is."""
    if isinstance(exc, nats_errors.SlowConsumerError):
        return Trouble.SLOW_CONSUMER
    if isinstance(exc, OSError | nats_errors.UnexpectedEOF | nats_errors.StaleConnectionError):
        return Trouble.CONNECTION
    if "permissions violation" in str(exc).lower():
        return Trouble.DENIED
    return Trouble.OTHER


class NatsConnection(Publisher):
    """One nats-py client behind the Connection protocol."""

    def __init__(self, nc: Client) -> None:
        super().__init__(nc)

    @classmethod
    async def open(
        cls,
        servers: list[str],
        *,
        name: str,
        connect_budget: float,
        on_trouble: TroubleCallback,
        on_disconnect: Callable[[], Awaitable[None]],
        on_reconnect: Callable[[], Awaitable[None]],
        options: dict[str, Any] | None = None,
    ) -> NatsConnection:
        """Connect (see :func:`bus._transport.connection.open_connection`); ConnectError when it cannot."""

        async def on_error(exc: Exception) -> None:
            await on_trouble(classify(exc), exc)

        nc = await open_connection(
            servers,
            name=name,
            connect_budget=connect_budget,
            on_error=on_error,
            on_disconnect=on_disconnect,
            on_reconnect=on_reconnect,
            options=options,
        )
        return cls(nc)

    @property
    def raw(self) -> Client:
        return self._nc

    @property
    def is_connected(self) -> bool:
        return self._nc.is_connected

    @property
    def max_payload(self) -> int:
        return self._nc.max_payload

    @property
    def server(self) -> str:
        url = self._nc.connected_url
        return url.netloc if url is not None else "?"

    async def subscribe(
        self, subject: str, cb: RawHandler, *, queue: str = "", pending_msgs_limit: int | None = None
    ) -> RawSubscription:
        limits: dict[str, Any] = {} if pending_msgs_limit is None else {"pending_msgs_limit": pending_msgs_limit}
        try:  # unset: nats-py's default
            return await self._nc.subscribe(subject, queue=queue, cb=cb, **limits)
        except nats_errors.Error as exc:
            raise not_sent(exc) from None

    async def subscribe_direct(self, subject: str, cb: DirectHandler, *, queue: str = "") -> RawSubscription:
        try:
            return await subscribe_direct(self._nc, subject, cb, queue)
        except nats_errors.Error as exc:
            raise not_sent(exc) from None

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        try:
            reply = await self._nc.request(subject, data, timeout=timeout)
        except nats_errors.NoRespondersError:
            raise NoResponders(f"nobody answers on {subject}") from None
        except nats_errors.TimeoutError:
            raise RequestTimeout(f"no reply on {subject} within {timeout}s") from None
        except nats_errors.Error as exc:
            raise not_sent(exc) from None
        return bytes(reply.data)

    def new_inbox(self) -> str:
        return self._nc.new_inbox()

    async def flush(self, timeout: float) -> None:
        try:
            await ordered_flush(self._nc, timeout)
        except nats_errors.TimeoutError:
            raise TimeoutError(f"the NATS server did not answer a flush within {timeout}s") from None
        except nats_errors.Error as exc:
            raise not_sent(exc) from None

    async def close(self, flush_timeout: float = 0.0) -> bool:
        flushed = True
        if flush_timeout > 0 and self._nc.is_connected:
            flushed = await flush_quietly(self._nc, flush_timeout)
        with contextlib.suppress(nats_errors.Error):
            await self._nc.close()
        return flushed

    async def open_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        return await bind_bucket(self._nc, name, ttl_s)

    async def ensure_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        return await ensure_bucket(self._nc, name, ttl_s)

    async def ensure_stream(self, spec: StreamSpec) -> StreamState:
        return await ensure_stream(self._nc, spec)

    async def stream_state(self, name: str) -> StreamState | None:
        return await stream_state(self._nc, name)

    async def pull_consumer(
        self, stream: str, subject: str, durable: str, *, ack_wait_s: float, max_ack_pending: int
    ) -> PullConsumer:
        return await open_pull_consumer(
            self._nc, stream, subject, durable, ack_wait_s=ack_wait_s, max_ack_pending=max_ack_pending
        )

    def read_since(self, stream: str, since: datetime) -> AsyncIterator[StreamMessage]:
        return read_since(self._nc, stream, since)

    def payload_store(self, max_object_bytes: int) -> ObjectStore:
        return PayloadStore(self._nc, max_object_bytes)

    async def ensure_payloads_bucket(self) -> None:
        await ensure_payloads_bucket(self._nc)
