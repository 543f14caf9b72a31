"""A session's timeline: its recorded events and its journal entries, merged in time order.

The events come from the recorded history (``hookbus up --record``), the
entries from the workspace journal; both carry RFC 3339 UTC times with
milliseconds, so one merge by time tells what happened and what reacted to
it. ``hookbus journal --session S --events`` prints it; the console shows it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from bus._client import Bus
from bus._journal.entries import JournalEntry
from bus._runtime.visible import visible
from subscribers.history._reader import recorded_events

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
