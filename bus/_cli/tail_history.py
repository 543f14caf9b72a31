"""``hookbus tail --since/--session``: the recorded events first, then the live ones, none twice, none lost.

The live subscription starts before the history is read; what it receives
meanwhile is held back, then shown after the history minus the events the
history already showed (same id), so the switch from stored to live has no
gap and no repeat.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Final

from bus._client import Bus
from bus._core.envelope import Event
from bus._runtime.quantities import parse_duration

#: ``--session`` without ``--since``: as far back as the stream keeps (its own age limit bounds it).
ALL_RECORDED_S: Final = 100 * 365 * 86400.0

Show = Callable[[Event], Awaitable[None]]


class HistoryThenLive:
    """Wraps tail's ``show``: the live handler, and the replay of the recorded events before it."""

    def __init__(self, show: Show, pattern: str, since: str | None, session: str | None) -> None:
        self._show = show
        self._pattern = pattern
        self._since_s = parse_duration(since, "--since") if since else ALL_RECORDED_S
        self._session = session
        self._held: list[Event] | None = []  # live events that came while the history was shown
        self._shown: set[str] = set()

    async def live(self, event: Event) -> None:
        """The live subscription's handler: held while the history is shown, then passed on."""
        if self._session is not None and event.session_id != self._session:
            return
        if self._held is not None:
            self._held.append(event)
        elif event.id not in self._shown:
            await self._show(event)

    async def replay(self, bus: Bus, stop: Callable[[], bool]) -> None:
        """Show the recorded events, then what the live subscription held meanwhile (each event once)."""
        from subscribers.history._reader import Skipped, recorded_events

        skipped = Skipped()
        async for event in recorded_events(bus, self._since_s, self._pattern, self._session, skipped):
            if stop():
                break
            self._shown.add(event.id)
            await self._show(event)
        if skipped.count:
            print(f"hookbus tail: {skipped.count} recorded messages were not valid events", file=sys.stderr)
        while self._held:  # in arrival order; what comes while these are shown joins the queue
            held, self._held = self._held, []
            for event in held:
                if not stop() and event.id not in self._shown:
                    await self._show(event)
        self._held = None
