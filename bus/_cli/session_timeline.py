"""``hookbus journal --session S --events``: a session's recorded events and journal entries, in time order.

The events come from the recorded history (``hookbus up --record``), the
entries from the workspace journal; both carry RFC 3339 UTC times with
milliseconds, so one merge by time tells what happened and what reacted to
it. Entries are ordered by the time their writer gave them (the journal's
``--since`` filters by the receive time instead).
"""

from __future__ import annotations

from typing import Any

import orjson

from bus._cli.options import command_bus
from subscribers.history._timeline import MAX_ENTRIES, entry_lines, event_lines, merged


async def print_timeline(args: Any, store: Any) -> int:
    """Print the session's timeline for ``hookbus journal --session S --events`` (``--json``: one object a line)."""
    from bus._core.errors import ConfigError
    from bus._runtime.quantities import parse_duration
    from subscribers.journal._store import Query

    if not args.session:
        raise ConfigError("--events joins one session's events and entries: give --session too")
    since_s = parse_duration(args.events_since, "--events-since")
    rows = store.query(Query(session=args.session, kind=args.kind, limit=MAX_ENTRIES))
    async with command_bus(args, "hookbus-journal") as bus:
        events = await event_lines(bus, args.session, since_s)
    for line in merged(events, entry_lines([row.entry for _, row in rows])):
        print(orjson.dumps(line.json).decode() if args.json else line.text, flush=True)
    return 0
