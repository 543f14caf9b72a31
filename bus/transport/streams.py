"""JetStream streams behind hookbus types: create or update one from a :class:`StreamSpec`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

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
