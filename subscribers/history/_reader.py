"""Reading the recorded history back: events from a time on, by pattern and session, oldest first.

What comes out of the stream is checked like anything received (the
envelope's rules), so a hostile publisher's bytes recorded yesterday are no
more trusted today; what fails the check is skipped and counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bus._client import Bus
from bus._core.envelope import Event, decode_event
from bus._core.errors import ConfigError, EnvelopeError
from bus._core.subjects import is_vouched, matches, normalise_pattern, split_vouched
from subscribers.history._subjects import HISTORY_STREAM


@dataclass
class Skipped:
    """Recorded messages that are not valid events (shown as a count, never printed)."""

    count: int = 0


async def recorded_events(
    bus: Bus,
    since_s: float,
    pattern: str = ">",
    session: str | None = None,
    skipped: Skipped | None = None,
) -> AsyncIterator[Event]:
    """The recorded events of the last ``since_s`` seconds matching ``pattern`` (and ``session``), oldest first.

    ConfigError when nothing is recorded (``hookbus up`` without ``--record``).
    """
    if await bus.port.stream_state(HISTORY_STREAM) is None:
        raise ConfigError(f"no recorded history on {', '.join(bus.servers)}: start 'hookbus up --record PATTERN'")
    nats_pattern = normalise_pattern(pattern)
    start = datetime.now(UTC) - timedelta(seconds=since_s)
    async for message in bus.port.read_since(HISTORY_STREAM, start):
        subject, publisher = message.subject, None
        if is_vouched(subject):  # recorded as published by a user (docs/protocol.md#publisher-identity)
            vouched = split_vouched(subject)
            if vouched is None:
                if skipped is not None:
                    skipped.count += 1
                continue
            publisher, subject = vouched
        if not matches(nats_pattern, subject):
            continue
        try:
            event = decode_event(subject, message.data, bus.max_bytes, bus.max_depth)
        except EnvelopeError:
            if skipped is not None:
                skipped.count += 1
            continue
        event.publisher = publisher
        if session is None or event.session_id == session:
            yield event
