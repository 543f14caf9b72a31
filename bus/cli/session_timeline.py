"""``hookbus journal --session S --events``: a session's recorded events and journal entries, in time order.

The events come from the recorded history (``hookbus up --record``), the
entries from the workspace journal; both carry RFC 3339 UTC times with
milliseconds, so one merge by time tells what happened and what reacted to
it. Entries are ordered by the time their writer gave them (the journal's
``--since`` filters by the receive time instead).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from bus.client import Bus
from bus.core.visible import visible
from bus.journal.entries import JournalEntry

#: Journal entries of one session read at most (the newest are kept).
MAX_ENTRIES: Final = 100_000
_PAYLOAD_CHARS: Final = 160


@dataclass(frozen=True, slots=True)
class Line:
    """One line of the timeline: when, and what to print (text or JSON)."""

    time: str
    text: str
    json: dict[str, Any]


async def event_lines(bus: Bus, session: str, since_s: float) -> list[Line]:
    from subscribers.history.reader import recorded_events

    lines = []
    async for event in recorded_events(bus, since_s, ">", session):
        payload = orjson.dumps(event.payload).decode()
        if len(payload) > _PAYLOAD_CHARS:
            payload = payload[: _PAYLOAD_CHARS - 1] + "…"
        text = f"{visible(event.timestamp)}  event    {event.subject} depth={event.depth} {visible(payload)}"
        lines.append(Line(event.timestamp, text, {"type": "event", **orjson.loads(event.raw)}))
    return lines


def entry_lines(entries: list[JournalEntry]) -> list[Line]:
    lines = []
    for entry in entries:
        cause = f" ({entry.cause})" if entry.cause else ""
        text = f"{entry.time}  {entry.kind:<8} {entry.point} {entry.who}: {entry.decision}{cause}"
        body = {name: getattr(entry, name) for name in ("kind", "point", "phase", "who", "decision", "cause", "time")}
        lines.append(Line(entry.time, visible(text), {"type": "journal", **body, "duration_ms": entry.duration_ms}))
    return lines


def merged(*parts: list[Line]) -> Iterator[Line]:
    """The lines of every part in time order (each part already is; ties keep events before entries)."""
    return heapq.merge(*(sorted(part, key=lambda line: line.time) for part in parts), key=lambda line: line.time)


async def print_timeline(args: Any, store: Any) -> int:
    """Print the session's timeline for ``hookbus journal --session S --events`` (``--json``: one object a line)."""
    from bus.cli.options import connection_args
    from bus.core.errors import ConfigError
    from bus.core.quantities import parse_duration
    from subscribers.journal.store import Query

    if not args.session:
        raise ConfigError("--events joins one session's events and entries: give --session too")
    since_s = parse_duration(args.events_since, "--events-since")
    rows = store.query(Query(session=args.session, kind=args.kind, limit=MAX_ENTRIES))
    async with Bus(args.nats_url, name="hookbus-journal", **connection_args(args)) as bus:
        events = await event_lines(bus, args.session, since_s)
    for line in merged(events, entry_lines([row.entry for _, row in rows])):
        print(orjson.dumps(line.json).decode() if args.json else line.text, flush=True)
    return 0
