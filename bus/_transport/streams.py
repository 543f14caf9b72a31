"""JetStream streams behind hookbus types: create or update one, read its state, consume it with explicit acks.

On a leaf node every stream is the hub's (:mod:`bus._transport.home`): the journal's entries cross the leaf
node link as they are, and the stream is created, read and consumed there, never a copy in the leaf's domain.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig

from bus._core.errors import JournalError
from bus._transport.connection import jetstream_replicas
from bus._transport.home import home_of


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A file-backed, limits-retention stream: what hookbus keeps (the journal)."""

    name: str
    subjects: tuple[str, ...]
    max_age_s: float
    max_bytes: int
    duplicate_window_s: float
    #: None: 3 on a cluster of three or more nodes, else 1.
    replicas: int | None = None


@dataclass(frozen=True, slots=True)
class StreamState:
    """What hookbus reads back of a stream: its name, creation time (its identity) and message count."""

    name: str
    created: str
    messages: int
    replicas: int


def _state_from_info(info: Any) -> StreamState:
    created: Any = info.created
    return StreamState(
        name=info.config.name,
        created=created.isoformat() if isinstance(created, datetime) else str(created or ""),
        messages=int(info.state.messages or 0),
        replicas=int(info.config.num_replicas or 1),
    )


async def ensure_stream(nc: Any, spec: StreamSpec) -> StreamState:
    """Create ``spec``'s stream, or update it to ``spec`` if it exists; JournalError if the server refuses."""
    config = StreamConfig(
        name=spec.name,
        subjects=list(spec.subjects),
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=spec.max_age_s,
        max_bytes=spec.max_bytes,
        num_replicas=spec.replicas if spec.replicas is not None else jetstream_replicas(nc),
        duplicate_window=spec.duplicate_window_s,
        allow_rollup_hdrs=False,  # no publisher erases what others journaled (purges are the operator's)
    )
    js = (await home_of(nc)).jetstream(nc)
    try:
        try:
            return _state_from_info(await js.add_stream(config))
        except js_errors.BadRequestError:
            return _state_from_info(await js.update_stream(config))
    except (nats_errors.Error, js_errors.Error) as exc:
        raise JournalError(f"cannot create or update stream {spec.name}: {exc!r}") from None


async def stream_state(nc: Any, name: str) -> StreamState | None:
    """The stream's state, None if it does not exist; JournalError if the server does not answer."""
    try:
        return _state_from_info(await (await home_of(nc)).jetstream(nc).stream_info(name))
    except js_errors.NotFoundError:
        return None
    except (nats_errors.Error, js_errors.Error) as exc:
        raise JournalError(f"cannot look up stream {name}: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class StreamMessage:
    """One message fetched from a stream: where it sits (None when its metadata cannot be read, and why)."""

    subject: str
    data: bytes
    stream_seq: int | None
    timestamp: datetime | None
    metadata_problem: str | None
    raw: Any = field(repr=False, compare=False)


def _message(msg: Any) -> StreamMessage:
    try:
        meta = msg.metadata
        return StreamMessage(msg.subject, msg.data, meta.sequence.stream, meta.timestamp, None, msg)
    except (nats_errors.Error, ValueError, IndexError) as exc:
        return StreamMessage(msg.subject, msg.data, None, None, repr(exc), msg)


class PullConsumer:
    """A durable pull consumer with explicit acks: fetch, ack, nak, and whether it still exists.

    Every failure is a JournalError (fetch) or a False/None answer (acks and the existence check),
    so its user names no nats-py type.
    """

    def __init__(self, stream: str, durable: str, sub: Any) -> None:
        self.stream = stream
        self.durable = durable
        self._sub = sub

    async def fetch(self, batch: int, timeout: float) -> list[StreamMessage]:
        """Up to ``batch`` messages; [] if none came within ``timeout``."""
        try:
            return [_message(msg) for msg in await self._sub.fetch(batch, timeout=timeout)]
        except (nats_errors.TimeoutError, TimeoutError):
            return []
        except (nats_errors.Error, js_errors.Error) as exc:
            raise JournalError(f"fetch from consumer {self.durable} failed: {exc!r}") from None

    async def exists(self) -> bool | None:
        """True if the server still has this consumer, False if someone deleted it, None if it does not answer."""
        try:
            await self._sub.consumer_info()
        except js_errors.NotFoundError:
            return False
        except (nats_errors.Error, js_errors.Error):
            return None
        return True

    async def close(self) -> None:
        """Stop this subscription to the consumer (quietly when the connection is gone)."""
        with contextlib.suppress(nats_errors.Error):
            await self._sub.unsubscribe()


async def ack(msg: StreamMessage) -> bool:
    """Acknowledge ``msg``; False if that could not be sent (it then comes back: a duplicate)."""
    try:
        await msg.raw.ack()
    except nats_errors.Error:
        return False
    return True


async def nak(msg: StreamMessage, delay_s: float) -> bool:
    """Ask for ``msg`` again after ``delay_s``; False if that could not be sent (it comes back after ack_wait)."""
    try:
        await msg.raw.nak(delay=delay_s)
    except nats_errors.Error:
        return False
    return True


async def open_pull_consumer(
    nc: Any, stream: str, subject: str, durable: str, *, ack_wait_s: float, max_ack_pending: int
) -> PullConsumer:
    """Bind to (or create) durable ``durable`` on ``stream``: explicit acks, from the first message on.

    Explicit acks: acknowledging "all up to N" would also acknowledge what a crashed
    consumer had fetched and never stored. JournalError if the server refuses.
    """
    config = ConsumerConfig(
        durable_name=durable,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
    )
    try:
        js = (await home_of(nc)).jetstream(nc)
        sub = await js.pull_subscribe(subject, durable=durable, stream=stream, config=config)
    except (nats_errors.Error, js_errors.Error) as exc:
        raise JournalError(f"cannot open consumer {durable} on stream {stream}: {exc!r}") from None
    return PullConsumer(stream, durable, sub)


async def read_since(nc: Any, stream: str, since: datetime) -> AsyncIterator[StreamMessage]:
    """Every message of ``stream`` stored at or after ``since``, oldest first, up to the last one stored now.

    Read with message gets (request and reply on this connection's inbox),
    not a consumer: a consumer's deliveries carry the events' own subjects, so
    any connection subscribed to ``>`` would receive the history a second
    time as if it were live. The first message at or after ``since`` is found
    by bisecting on sequence numbers. JournalError if the server refuses.
    """
    js = (await home_of(nc)).jetstream(nc)
    try:
        info = await js.stream_info(stream)
    except (nats_errors.Error, js_errors.Error) as exc:
        raise JournalError(f"cannot read stream {stream}: {exc!r}") from None
    first, last = int(info.state.first_seq or 0), int(info.state.last_seq or 0)
    if not info.state.messages:
        return
    low, high = first, last + 1
    while low < high:  # the first sequence whose message is at or after ``since``
        middle = (low + high) // 2
        found = await _next_message(js, stream, middle, last)
        if found is None or found.timestamp is None or found.timestamp >= since:
            high = middle
        else:
            low = (found.stream_seq or middle) + 1
    seq = low
    while seq <= last:
        found = await _next_message(js, stream, seq, last)
        if found is None:
            return
        yield found
        seq = (found.stream_seq or seq) + 1


async def _next_message(js: Any, stream: str, seq: int, last: int) -> StreamMessage | None:
    """The first message at or after ``seq`` (deleted ones are skipped), None past ``last``."""
    try:
        raw = await js.get_msg(stream, seq=seq, subject=">", next=True)
    except js_errors.NotFoundError:
        return None
    except (nats_errors.Error, js_errors.Error) as exc:
        raise JournalError(f"reading stream {stream} at {seq} failed: {exc!r}") from None
    if raw.seq is None or raw.seq > last:
        return None
    return StreamMessage(raw.subject or "", raw.data or b"", raw.seq, _stored_at(raw.time), None, raw)


def _stored_at(text: Any) -> datetime | None:
    """The server's RFC 3339 time of a stored message (nanoseconds cut to what datetime holds)."""
    if isinstance(text, datetime):
        return text
    if not isinstance(text, str):
        return None
    head, dot, fraction = text.rstrip("Z").partition(".")
    digits = "".join(ch for ch in fraction if ch.isdigit())[:6]
    try:
        moment = datetime.fromisoformat(f"{head}.{digits or '0'}" if dot else head)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
