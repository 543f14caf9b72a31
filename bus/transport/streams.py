"""JetStream streams behind hookbus types: create or update one, read its state, consume it with explicit acks."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig

from bus.core.errors import JournalError
from bus.transport.connection import jetstream_replicas


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


def state_of(info: Any) -> StreamState:
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
    )
    js = nc.jetstream()
    try:
        try:
            return state_of(await js.add_stream(config))
        except js_errors.BadRequestError:
            return state_of(await js.update_stream(config))
    except (nats_errors.Error, js_errors.Error) as exc:
        raise JournalError(f"cannot create or update stream {spec.name}: {exc!r}") from None


async def stream_state(nc: Any, name: str) -> StreamState | None:
    """The stream's state, None if it does not exist; JournalError if the server does not answer."""
    try:
        return state_of(await nc.jetstream().stream_info(name))
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
        sub = await nc.jetstream().pull_subscribe(subject, durable=durable, stream=stream, config=config)
    except (nats_errors.Error, js_errors.Error) as exc:
        raise JournalError(f"cannot open consumer {durable} on stream {stream}: {exc!r}") from None
    return PullConsumer(stream, durable, sub)
