"""``hookbus up --record PATTERN``: keep the events of PATTERN in the stream ``HOOKBUS_HISTORY``, within limits.

The server stores what is published on the patterns; publishers and
subscribers are untouched (delivery stays core NATS, at-most-once). The
stream keeps events up to an age and a size (the oldest go first), so
recording cannot fill a disk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from bus._client import Bus
from bus._core.errors import ConfigError, JournalError, SubjectError
from bus._core.subjects import hides_internal, is_internal, normalise_pattern, vouched_pattern
from bus._service import ServiceContext
from bus._transport.streams import StreamSpec, StreamState
from subscribers.history._subjects import HISTORY_STREAM

DEFAULT_MAX_AGE_S: Final = 7 * 24 * 3600.0
DEFAULT_MAX_BYTES: Final = 1024**3


@dataclass(frozen=True)
class HistorySettings:
    """What to record (subscription patterns) and how much to keep (age, size)."""

    patterns: tuple[str, ...]
    max_age_s: float = DEFAULT_MAX_AGE_S
    max_bytes: int = DEFAULT_MAX_BYTES
    replicas: int | None = None


def checked_patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The NATS patterns to record; ConfigError for one that is not a pattern or would take in plumbing.

    ``>`` or ``*.>`` would also store reply inboxes, JetStream's API and
    hookbus's middleware requests: a pattern must name its first token.
    """
    out: list[str] = []
    for pattern in patterns:
        try:
            nats_pattern = normalise_pattern(pattern)
        except SubjectError as exc:
            raise ConfigError(f"--record {pattern!r}: {exc}") from None
        if hides_internal(nats_pattern) or is_internal(nats_pattern):
            raise ConfigError(
                f"--record {pattern!r} would record internal subjects too: name the events, e.g. 'prx.>' or 'eva.>'"
            )
        if nats_pattern not in out:
            out.append(nats_pattern)
    return tuple(out)


def recorded_subjects(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """``patterns`` and their vouched forms (``hookbus.from.*.<pattern>``): events as hookbus publishes them."""
    return patterns + tuple(mirror for mirror in map(vouched_pattern, patterns) if mirror is not None)


def stream_spec(settings: HistorySettings) -> StreamSpec:
    return StreamSpec(
        name=HISTORY_STREAM,
        subjects=recorded_subjects(checked_patterns(settings.patterns)),
        max_age_s=settings.max_age_s,
        max_bytes=settings.max_bytes,
        duplicate_window_s=min(120.0, settings.max_age_s),
        replicas=settings.replicas,
    )


async def ensure_history(bus: Bus, settings: HistorySettings) -> StreamState:
    """Create or update the history stream; ConfigError naming what the server refused."""
    spec = stream_spec(settings)
    try:
        return await bus.port.ensure_stream(spec)
    except JournalError as exc:
        raise ConfigError(f"cannot record {', '.join(spec.subjects)}: {exc}") from None


@asynccontextmanager
async def service(ctx: ServiceContext, settings: HistorySettings) -> AsyncIterator[None]:
    """Record while the bus is up (the stream stays: its limits keep it bounded)."""
    await ensure_history(ctx.bus, settings)
    age = f"{settings.max_age_s / 3600:g} h"
    size = f"{settings.max_bytes / 1024**2:g} MiB"
    recorded = ", ".join(stream_spec(settings).subjects)
    ctx.lines.append(f"  history  {recorded} in {HISTORY_STREAM} (up to {age}, {size})")
    yield
