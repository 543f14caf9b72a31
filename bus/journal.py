"""Journal entries of middleware reactions, published as hookbus events on ``hookbus.journal.middleware``.

One entry per reaction, in chain order, so that a handler that was absent,
failed, timed out, was denied by trust, or cancelled can be told apart later.
Entries are batched: everything journaled within ``WINDOW`` seconds goes out
as one event ``{"entries": [...]}``, in order, off the caller's path.
Measured (bench/bench_middleware.py): one event per reaction cost the kernel
about as much CPU as the rest of the call and added a fifth to a call's
latency, since each is one more write and one more message for the server.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import TYPE_CHECKING, Any, Final

from bus.decisions import Decision
from bus.eager import run_eager
from bus.subjects import JOURNAL_MIDDLEWARE

if TYPE_CHECKING:
    from bus.client import Bus

log = logging.getLogger("hookbus.middleware")

#: Entries per journal event at most (a full batch goes out at once).
MAX_BATCH: Final = 200
#: Seconds entries wait for company before they go out.
WINDOW: Final = 0.005


def entry(
    *,
    request_id: str,
    stage: str,
    phase: str,
    handler: str,
    outcome: str,
    decision: Decision | str,
    duration_ms: float,
    cause: str | None,
    session: str | None,
    agent: str | None,
    depth: int,
    reason: str | None = None,
) -> dict[str, Any]:
    """The payload of one journal entry."""
    kind = decision if isinstance(decision, str) else decision.kind
    body: dict[str, Any] = {
        "id": request_id,
        "stage": stage,
        "phase": phase,
        "handler": handler,
        "outcome": outcome,
        "decision": kind,
        "duration_ms": round(duration_ms, 3),
        "cause": cause,
        "session": session,
        "agent": agent,
        "depth": depth,
    }
    reason = reason if reason is not None else getattr(decision, "reason", None)
    if reason is not None:
        body["reason"] = reason
    return body


class JournalSink:
    """Collects entries and publishes them once per pass of the event loop."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._pending: list[dict[str, Any]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[Any]] = set()

    def publish(self, entries: list[dict[str, Any]]) -> None:
        """Queue one call's entries (kept together and in order)."""
        self._pending.extend(entries)
        if len(self._pending) >= MAX_BATCH:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(WINDOW, self._flush)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        # An empty context: the journal is the kernel's record, not an emit at the caller's depth.
        contextvars.Context().run(self._send, pending)

    def _send(self, pending: list[dict[str, Any]]) -> None:
        for start in range(0, len(pending), MAX_BATCH):
            emitting = self._bus.emit(JOURNAL_MIDDLEWARE, {"entries": pending[start : start + MAX_BATCH]})
            try:
                finished, task = run_eager(emitting)  # emit rarely waits: no task for it then
            except Exception as exc:
                log.warning("journal entries not published: %r", exc)
                continue
            if not finished:
                self._sending.add(task)
                task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[Any]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("journal entries not published: %r", task.exception())

    async def drain(self) -> None:
        """Publish what is queued now and wait until it went out (closing)."""
        if self._pending:
            self._flush()
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=2.0)
