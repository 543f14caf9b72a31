"""A snapshot of the middleware over the whole bus: per (handler, stage) calls, decisions, faults, latency, last error.

Fed the way the fleet's series are (every kernel's counters reports, checked
and capped by :func:`subscribers.fleet_metrics._reports.apply_report`) plus the
middleware journal entries, which say what the last fault was and when. It
subscribes outside the fleet's queue group: it sees every report, whoever else
counts them. ``GET /api/middleware/metrics`` and ``hookbus chain --stats`` read it.
"""

from __future__ import annotations

import time
from typing import Any, Final

from bus._core.errors import JournalError
from bus._core.subjects import COUNTERS_PREFIX
from bus._journal.entries import decode_entry
from bus._journal.subjects import JOURNAL_PREFIX
from bus._middleware.faults import Outcome
from bus._middleware.kernel.metrics import BUCKETS
from bus._transport.port import Port, RawMessage, RawSubscription, unsubscribe_all
from subscribers.fleet_metrics._fleet_series import FleetMetrics
from subscribers.fleet_metrics._reports import apply_report

#: Journal decisions that are faults (a handler's turn that did not end in its own decision).
FAULTS: Final = frozenset(o.value for o in Outcome) - {Outcome.OK.value, Outcome.UNTRUSTED.value}
#: Outcomes of a turn in which the handler was not called (not trusted, its chain held or broken, an input missing).
NOT_CALLED: Final = frozenset(
    {Outcome.UNTRUSTED.value, Outcome.BROKEN.value, Outcome.CHANGED.value, Outcome.SKIPPED.value}
)
#: Characters of a last error kept (a module's cause can be long).
ERROR_LIMIT: Final = 300

_Pair = tuple[str, str]


class MiddlewareSnapshot:
    """Everything kernels reported since ``start``, by (handler, stage); ``snapshot()`` for the API and the CLI."""

    def __init__(self, bus: Port) -> None:
        self.bus = bus
        self.fleet = FleetMetrics()  # never registered: only its middleware series and label caps are used
        self.errors: dict[_Pair, dict[str, Any]] = {}
        self.since = time.time()
        self._subs: list[RawSubscription] = []

    async def start(self) -> MiddlewareSnapshot:
        bus = self.bus
        for pattern in (COUNTERS_PREFIX, f"{COUNTERS_PREFIX}.>"):
            self._subs.append(await bus.subscribe_raw(pattern, self._on_report))
        for pattern in (f"{JOURNAL_PREFIX}.middleware", f"{JOURNAL_PREFIX}.middleware.>"):
            self._subs.append(await bus.subscribe_raw(pattern, self._on_entry))
        await bus.flush()
        return self

    async def stop(self) -> None:
        subs, self._subs = self._subs, []
        await unsubscribe_all(subs)

    async def _on_report(self, msg: RawMessage) -> None:
        apply_report(self.fleet, msg.data)

    async def _on_entry(self, msg: RawMessage) -> None:
        try:
            entry = decode_entry(msg.data, msg.subject)
        except JournalError:
            return  # the fleet receiver counts refused entries; here only faults matter
        if entry.decision not in FAULTS:
            return
        pair = (self.fleet.handlers(entry.who), self.fleet.stages(entry.point))  # capped as the counts are
        cause = entry.cause or ""
        self.errors[pair] = {
            "outcome": entry.decision,
            "cause": cause if len(cause) <= ERROR_LIMIT else cause[:ERROR_LIMIT] + "…",
            "time": entry.time or None,
        }

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per (handler, stage), sorted: calls, decisions, faults by cause, panics (raised), timeouts,
        total and mean time of the timed calls, p50/p95 (ms), last error."""
        fleet = self.fleet
        rows: dict[_Pair, dict[str, Any]] = {}

        def row(pair: _Pair) -> dict[str, Any]:
            found = rows.get(pair)
            if found is None:
                found = rows[pair] = {
                    "handler": pair[0], "stage": pair[1], "calls": 0, "decisions": {}, "faults": {},
                    "panics": 0, "timeouts": 0, "total_ms": 0.0, "mean_ms": None,
                }  # fmt: skip
            return found

        for (handler, stage, outcome), value in dict(fleet.mw_calls.values).items():
            target = row((handler, stage))
            target["calls"] += int(value)
            if outcome != Outcome.OK.value:
                target["faults"][outcome] = int(value)
        for (handler, stage, decision), value in dict(fleet.mw_decisions.values).items():
            row((handler, stage))["decisions"][decision] = int(value)
        for (handler, stage), (buckets, total) in dict(fleet.mw_duration.values).items():
            target = row((handler, stage))
            target["p50_ms"], target["p95_ms"] = quantile_ms(buckets, 0.5), quantile_ms(buckets, 0.95)
            timed, total_ms = sum(buckets), total[0] * 1000
            target["total_ms"] = round(total_ms, 3)
            target["mean_ms"] = round(total_ms / timed, 3) if timed else None
        for pair, error in dict(self.errors).items():
            row(pair)["last_error"] = error
        for target in rows.values():
            target["panics"] = target["faults"].get(Outcome.FAILED.value, 0)
            target["timeouts"] = target["faults"].get(Outcome.TIMEOUT.value, 0)
        return [rows[pair] for pair in sorted(rows)]

    def hook_points(self) -> list[dict[str, Any]]:
        """The rows as agent_os names them per (hook, point): calls (turns that called the handler), panics,
        timeouts, total and mean time, last error (``outcome: cause``, or None)."""
        return [as_hook_point(row) for row in self.snapshot()]


def as_hook_point(row: dict[str, Any]) -> dict[str, Any]:
    """One :meth:`MiddlewareSnapshot.snapshot` row under agent_os's names (``GET /v1/hooks/metrics``)."""
    error = row.get("last_error")
    not_called = sum(n for outcome, n in row["faults"].items() if outcome in NOT_CALLED)
    return {
        "hook": row["handler"],
        "point": row["stage"],
        "calls": row["calls"] - not_called,
        "panics": row["panics"],
        "timeouts": row["timeouts"],
        "total_ms": row["total_ms"],
        "mean_ms": row["mean_ms"],
        "last_error": f"{error['outcome']}: {error['cause']}" if error else None,
        "last_error_at": error["time"] if error else None,
    }


def quantile_ms(buckets: list[int], q: float) -> float | None:
    """The upper bound (ms) of the latency bucket holding the ``q`` quantile; None if none, or past the last bound."""
    total = sum(buckets)
    if not total:
        return None
    rank, running = q * total, 0
    for index, count in enumerate(buckets):
        running += count
        if running >= rank:
            return BUCKETS[index] * 1000 if index < len(BUCKETS) else None
    return None
