"""A plugin's log lines (PRX's ``prx:host/log``): the worker's log and the journal, a bounded number per call.

Each call keeps its first ``MAX_LINES_PER_CALL`` lines (control characters
made visible, cut at the journal's cap on ``cause``) and only counts the rest,
so a plugin logging in a loop writes at most that many lines to the worker's
log and the journal per event, and one more saying how many were dropped. The
worker journals them after the call as ``shell_hook`` entries with phase
``log``: who is the plugin's hook id, point the handled event's subject, the
level the decision and the line the cause. The plugin chooses the level (one
of PRX's five) and the text, nothing else an entry carries.
"""

from __future__ import annotations

import threading
from typing import Final

from bus._core.envelope import Event
from bus._journal.entries import CAUSE_CAP, JournalEntry
from bus._runtime.visible import visible

#: PRX's levels (``prx:host/log``'s ``level`` enum), as the journal's decision of a plugin's log line.
LEVELS: Final = ("trace", "debug", "info", "warn", "error")
#: What a level the host does not know is written as.
DEFAULT_LEVEL: Final = "info"
#: The lines of one call that reach the log and the journal; the rest are counted in one more entry.
MAX_LINES_PER_CALL: Final = 20
PHASE: Final = "log"
#: The decision of the entry that counts the dropped lines.
DROPPED: Final = "dropped"


def shown(message: str) -> str:
    """A plugin's log message as written: visible, and at most the journal's ``cause`` cap."""
    text = visible(message[:CAUSE_CAP])
    return text if len(text) <= CAUSE_CAP else text[: CAUSE_CAP - 1] + "…"


class CallLog:
    """The log lines of one call: the first ``MAX_LINES_PER_CALL`` kept, the rest counted (thread-safe).

    The worker takes the entries once, after the call; lines a call left
    behind in a host call logs later still count against its bound and reach
    the worker's log only.
    """

    def __init__(self) -> None:
        self._lines: list[tuple[str, str]] = []
        self._kept = 0
        self._dropped = 0
        self._taken = False
        self._lock = threading.Lock()

    def add(self, level: str, message: str) -> tuple[str, str] | None:
        """Keep a line; it as written (level, text), or None past the bound (then only counted)."""
        with self._lock:
            if self._kept >= MAX_LINES_PER_CALL:
                self._dropped += 1
                return None
            self._kept += 1
            line = (level if level in LEVELS else DEFAULT_LEVEL, shown(message))
            if not self._taken:
                self._lines.append(line)
            return line

    def take(self, who: str, event: Event) -> tuple[list[JournalEntry], int]:
        """The journal entries of the lines kept, and one counting the dropped ones; and how many were dropped.

        Only the first take has any: the lines are journaled once.
        """
        with self._lock:
            if self._taken:
                return [], 0
            self._taken = True
            lines, dropped, self._lines = self._lines, self._dropped, []
        made = [_entry(who, event, level, text) for level, text in lines]
        if dropped:
            made.append(_entry(who, event, DROPPED, dropped_cause(dropped)))
        return made, dropped


def dropped_cause(count: int) -> str:
    return f"{count} more log line{'s' if count != 1 else ''} dropped (at most {MAX_LINES_PER_CALL} per event)"


def _entry(who: str, event: Event, decision: str, cause: str) -> JournalEntry:
    return JournalEntry(
        kind="shell_hook",
        point=event.subject,
        phase=PHASE,
        who=who,
        decision=decision,
        cause=cause,
        session=event.session_id,
        depth=event.depth,
        trace_id=event.id,
    )
