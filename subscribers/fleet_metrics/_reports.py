"""Counters reports (``hookbus.counters[.<user>]``) into the fleet's series, re-checked as if the sender were hostile.

The schema checks types and signs; here every count is capped
(``MAX_COUNT`` per value per report), maps and lists are cut to a bounded
length, outcomes and decisions must be known ones, latency must have the
kernel's buckets, and every label goes through its cap. A report with
anything cut still counts what is left, and is counted as ``clamped``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from bus._core.decisions import Cancel, Continue, Patch
from bus._core.schema import decode
from bus._counters import CountersMsg, MiddlewareCountsMsg
from bus._middleware.faults import Outcome
from bus._middleware.kernel.metrics import BUCKETS as MIDDLEWARE_BUCKETS
from subscribers.fleet_metrics._errors import CountersReportError
from subscribers.fleet_metrics._fleet_series import Capped, FleetMetrics
from subscribers.fleet_metrics._series import FleetCounter

#: Most a value may add in one report: far above what a process counts in a few seconds.
MAX_COUNT: Final = 100_000_000
#: Keys of one map, and (handler, stage) entries of one report, read before the rest is cut.
MAX_KEYS: Final = 1024
MAX_MIDDLEWARE: Final = 256
#: Largest report read at all (a sender's is well under the bus limit).
MAX_REPORT_BYTES: Final = 256 * 1024
#: Seconds one reaction may add to a latency sum: the longest handler timeout, twice.
MAX_SECONDS_PER_REACTION: Final = 60.0

OUTCOMES: Final = frozenset(outcome.value for outcome in Outcome)
DECISIONS: Final = frozenset((Continue.kind, Cancel.kind, Patch.kind))


class _Clamp:
    """Remembers whether anything of a report was cut."""

    __slots__ = ("cut",)

    def __init__(self) -> None:
        self.cut = False

    def count(self, value: int) -> int:
        if value > MAX_COUNT:
            self.cut = True
            return MAX_COUNT
        return value

    def items(self, values: Mapping[str, int]) -> list[tuple[str, int]]:
        items = list(values.items())
        if len(items) > MAX_KEYS:
            self.cut = True
            items = items[:MAX_KEYS]
        return items


def apply_report(fleet: FleetMetrics, data: bytes) -> bool:
    """Count one report's differences; False (and counted as refused) if it is not a report at all."""
    try:
        if len(data) > MAX_REPORT_BYTES:
            raise CountersReportError(f"counters report of {len(data)} bytes, over {MAX_REPORT_BYTES}")
        report = decode(data, CountersMsg, "counters report", CountersReportError)
    except CountersReportError:
        fleet.reports.add(("refused",))
        return False
    clamp = _Clamp()
    _labelled(fleet.dropped, report.dropped, fleet.reasons, clamp)
    _labelled(fleet.delivered, report.delivered, fleet.reported_subjects, clamp)
    _labelled(fleet.handler_errors, report.handler_errors, fleet.reported_subjects, clamp)
    fleet.truncated.add((), clamp.count(report.truncated))
    fleet.disconnects.add((), clamp.count(report.disconnects))
    fleet.reconnects.add((), clamp.count(report.reconnects))
    entries = report.middleware
    if len(entries) > MAX_MIDDLEWARE:
        clamp.cut, entries = True, entries[:MAX_MIDDLEWARE]
    for entry in entries:
        _middleware(fleet, entry, clamp)
    fleet.reports.add(("clamped" if clamp.cut else "accepted",))
    return True


def _labelled(counter: FleetCounter, values: Mapping[str, int], cap: Capped, clamp: _Clamp) -> None:
    for label, value in clamp.items(values):
        if value:
            counter.add((cap(label),), clamp.count(value))


def _middleware(fleet: FleetMetrics, entry: MiddlewareCountsMsg, clamp: _Clamp) -> None:
    pair = (fleet.handlers(entry.handler), fleet.stages(entry.stage))
    for outcome, value in clamp.items(entry.calls):
        if outcome not in OUTCOMES:
            clamp.cut = True
            continue
        if value:
            fleet.mw_calls.add((*pair, outcome), clamp.count(value))
    for decision, value in clamp.items(entry.decisions):
        if decision not in DECISIONS:
            clamp.cut = True
            continue
        if value:
            fleet.mw_decisions.add((*pair, decision), clamp.count(value))
    if entry.fail_closed:
        fleet.mw_fail_closed.add(pair, clamp.count(entry.fail_closed))
    if not entry.latency:
        return
    if len(entry.latency) != len(MIDDLEWARE_BUCKETS) + 1:
        clamp.cut = True
        return
    counts = [clamp.count(value) for value in entry.latency]
    seconds = min(entry.latency_sum, sum(counts) * MAX_SECONDS_PER_REACTION)
    if seconds < entry.latency_sum:
        clamp.cut = True
    fleet.mw_duration.add_buckets(pair, counts, seconds)
