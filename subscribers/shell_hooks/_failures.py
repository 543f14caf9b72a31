"""Failing hook runs where people look: one line each on ``hookbus up``'s output, with their stderr's end.

The lines come from the journal entries of shell hook runs (``hookbus.journal.shell_hook[.<origin>]``),
so a run on any worker of the bus shows up, checked and clamped like every journal entry. A flood of
failures prints at most ``burst`` lines per ``interval`` seconds; the next line says how many were not shown.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final, TextIO

from bus._core.errors import JournalError
from bus._journal.entries import JournalEntry, decode_checked
from bus._journal.subjects import JOURNAL_PREFIX
from bus._runtime.visible import visible_lines
from bus._service import ServiceContext
from bus._transport.port import RawMessage

log = logging.getLogger("hookbus.shell")

#: The journal subjects of shell hook runs: without an origin, and with one.
SUBJECTS: Final = (f"{JOURNAL_PREFIX}.shell_hook", f"{JOURNAL_PREFIX}.shell_hook.*")
#: The outcomes printed: the run failed or timed out (refusals are logged by the worker itself).
FAILED: Final = frozenset({"failed", "timeout"})
#: Stderr shown per line: its last few lines, at most this many characters.
TAIL_LINES: Final = 3
TAIL_CHARS: Final = 300


def failure_line(entry: JournalEntry) -> str:
    """One line for a failing run: who, on what, why, and the end of its stderr (escaped)."""
    lines = [line for line in visible_lines(entry.stderr or "") if line.strip()][-TAIL_LINES:]
    tail = " | ".join(lines) or "(no stderr)"
    if len(tail) > TAIL_CHARS:
        tail = "…" + tail[-(TAIL_CHARS - 1) :]
    cause = f" ({' '.join(visible_lines(entry.cause))})" if entry.cause else ""
    return f"hook {' '.join(visible_lines(entry.who))} on {entry.point} {entry.decision}{cause}: {tail}"


class FailurePrinter:
    """Prints failing runs, at most ``burst`` lines per ``interval`` seconds."""

    def __init__(
        self,
        out: TextIO = sys.stdout,
        burst: int = 5,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._window_start = -interval
        self._shown = 0
        self.skipped = 0

    def take(self, data: bytes, subject: str) -> None:
        """A journal message: print it if it is a failing run and the budget allows."""
        try:
            entry, _ = decode_checked(data, subject)
        except JournalError as exc:
            log.debug("not a journal entry on %s: %s", subject, exc)
            return
        if entry.decision not in FAILED:
            return
        now = self._clock()
        if now - self._window_start >= self.interval:
            self._window_start, self._shown = now, 0
        if self._shown >= self.burst:
            self.skipped += 1
            return
        self._shown += 1
        line = failure_line(entry)
        if self.skipped:
            line += f" (and {self.skipped} more failing runs not shown: hookbus journal --kind shell_hook)"
            self.skipped = 0
        print(f"hookbus up: {line}", file=self.out, flush=True)


@asynccontextmanager
async def failure_lines(ctx: ServiceContext) -> AsyncIterator[None]:
    """While the bus is up, print a line for each failing shell hook run on it."""
    printer = FailurePrinter()

    async def on_message(msg: RawMessage) -> None:
        printer.take(msg.data, msg.subject)

    subs = [await ctx.bus.port.subscribe_raw(subject, on_message) for subject in SUBJECTS]
    ctx.lines.append("  failures failing hook runs are printed here (rate-limited)")
    try:
        yield
    finally:
        for sub in subs:
            await sub.unsubscribe()
