"""The counters report: what this process counted since its last report, sent over the bus.

Agents are many, short-lived and spread over machines; nobody scrapes them.
So every process sends the differences of its counters (drops by reason,
truncations, deliveries, handler errors, NATS disconnects, middleware
reactions and their latency) on ``hookbus.counters[.<user>]``, batched every
few seconds and once more when its Bus closes, and one receiver (``hookbus
up``, ``hookbus metrics``) turns them into the fleet's series. The emit and
delivery paths are not touched: the report reads the same plain integers the
scrape does.

The baseline is process-wide, so a process with several Buses reports each
count once, through whichever Bus sends first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Final

import msgspec

from bus._core.schema import NonNegative
from bus._core.subjects import counters_subject
from bus._journal.entries import PROCESS
from bus._middleware.kernel.metrics import MIDDLEWARE
from bus._runtime.stats import COLLECTOR
from bus._transport.port import Port


class MiddlewareCountsMsg(msgspec.Struct, kw_only=True):
    """One (handler, stage) of a counters report: reactions since the last report, and their latency."""

    handler: str
    stage: str
    calls: dict[str, NonNegative] = {}  # outcome (ok, timeout, failed, ...) -> reactions
    decisions: dict[str, NonNegative] = {}  # continue | cancel | patch -> reactions
    fail_closed: NonNegative = 0  # faults of a fail_closed handler that cancelled
    latency: list[NonNegative] = []  # reactions per latency bucket (bus.core.fleet.LATENCY_BUCKETS, then +Inf)
    latency_sum: Annotated[float, msgspec.Meta(ge=0)] = 0.0  # seconds


class CountersMsg(msgspec.Struct, kw_only=True):
    """On ``hookbus.counters[.<user>]``: what one process counted since its previous report (docs/metrics.md).

    Every count is a difference, never a total, so a lost report loses only
    its own counts; a receiver re-checks the ranges and caps the labels.
    """

    process: str  # host:pid, informational
    dropped: dict[str, NonNegative] = {}  # reason -> events
    truncated: NonNegative = 0
    delivered: dict[str, NonNegative] = {}  # subject -> events handed to a handler
    handler_errors: dict[str, NonNegative] = {}  # subscription pattern -> handlers that raised
    disconnects: NonNegative = 0
    reconnects: NonNegative = 0
    middleware: list[MiddlewareCountsMsg] = []


log = logging.getLogger("hookbus.counters")

#: Seconds between reports (0 or less: no reports at all); the variable overrides the default.
INTERVAL_ENV: Final = "HOOKBUS_COUNTERS_INTERVAL_S"
DEFAULT_INTERVAL_S: Final = 5.0
#: (handler, stage) pairs per message: keeps a report of a busy kernel well under the size limit.
MIDDLEWARE_PER_MESSAGE: Final = 64

_Triple = tuple[str, str, str]  # (handler, stage, outcome or decision)
_Pair = tuple[str, str]  # (handler, stage)


@dataclass
class _Totals:
    """Every count of the process at one moment."""

    dropped: dict[str, int] = field(default_factory=dict)
    delivered: dict[str, int] = field(default_factory=dict)
    handler_errors: dict[str, int] = field(default_factory=dict)
    truncated: int = 0
    disconnects: int = 0
    reconnects: int = 0
    calls: dict[_Triple, int] = field(default_factory=dict)
    decisions: dict[_Triple, int] = field(default_factory=dict)
    fail_closed: dict[_Pair, int] = field(default_factory=dict)
    latency: dict[_Pair, tuple[list[int], float]] = field(default_factory=dict)


def _now() -> _Totals:
    bus = COLLECTOR.total()
    # dict() copies are single C calls, atomic under the GIL: the event loop may be counting meanwhile.
    return _Totals(
        dropped=dict(bus.dropped),
        delivered=dict(bus.delivered),
        handler_errors=dict(bus.handler_errors),
        truncated=bus.truncated,
        disconnects=bus.disconnects,
        reconnects=bus.reconnects,
        calls=dict(MIDDLEWARE.calls),
        decisions=dict(MIDDLEWARE.decisions),
        fail_closed=dict(MIDDLEWARE.fail_closed),
        latency={key: (list(s.buckets), s.sum) for key, s in dict(MIDDLEWARE.latency).items()},
    )


def _minus(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: value - before.get(key, 0) for key, value in now.items() if value > before.get(key, 0)}


def _by_pair(now: dict[_Triple, int], before: dict[_Triple, int]) -> dict[_Pair, dict[str, int]]:
    """The positive differences of (handler, stage, label) counts, grouped by (handler, stage)."""
    out: dict[_Pair, dict[str, int]] = {}
    for (handler, stage, label), value in now.items():
        diff = value - before.get((handler, stage, label), 0)
        if diff > 0:
            out.setdefault((handler, stage), {})[label] = diff
    return out


def _middleware(now: _Totals, before: _Totals) -> Iterator[MiddlewareCountsMsg]:
    calls, decisions = _by_pair(now.calls, before.calls), _by_pair(now.decisions, before.decisions)
    for pair in sorted(set(calls) | set(decisions) | set(now.latency)):
        fail_closed = now.fail_closed.get(pair, 0) - before.fail_closed.get(pair, 0)
        buckets, total = now.latency.get(pair, ([], 0.0))
        old_buckets, old_total = before.latency.get(pair, ([0] * len(buckets), 0.0))
        latency = [n - o for n, o in zip(buckets, old_buckets, strict=True)]
        timed = any(latency)
        if pair in calls or pair in decisions or fail_closed > 0 or timed:
            yield MiddlewareCountsMsg(
                handler=pair[0],
                stage=pair[1],
                calls=calls.get(pair, {}),
                decisions=decisions.get(pair, {}),
                fail_closed=max(fail_closed, 0),
                latency=latency if timed else [],
                latency_sum=max(total - old_total, 0.0) if timed else 0.0,
            )


def _reports(now: _Totals, before: _Totals) -> list[CountersMsg]:
    """The differences ``now - before`` as messages (none if nothing changed)."""
    head = CountersMsg(
        process=PROCESS,
        dropped=_minus(now.dropped, before.dropped),
        truncated=max(now.truncated - before.truncated, 0),
        delivered=_minus(now.delivered, before.delivered),
        handler_errors=_minus(now.handler_errors, before.handler_errors),
        disconnects=max(now.disconnects - before.disconnects, 0),
        reconnects=max(now.reconnects - before.reconnects, 0),
    )
    middleware = list(_middleware(now, before))
    chunks = [middleware[i : i + MIDDLEWARE_PER_MESSAGE] for i in range(0, len(middleware), MIDDLEWARE_PER_MESSAGE)]
    if chunks:
        head.middleware = chunks[0]
    out = [head] if chunks or head != CountersMsg(process=PROCESS) else []
    out.extend(CountersMsg(process=PROCESS, middleware=chunk) for chunk in chunks[1:])
    return out


_lock = threading.Lock()
_reported = _Totals()
#: When the baseline last moved (monotonic seconds).
_taken = [0.0]


def take_reports(min_gap: float = 0.0) -> list[bytes]:
    """What the process counted since the last call (from any Bus), encoded; moves the baseline.

    With ``min_gap``, nothing is taken (an empty list) if another Bus of the
    process took a report less than ``min_gap`` seconds ago: the process
    reports once per interval however many Buses it holds (summing every
    Bus's counters per Bus per interval made reporting grow as Buses squared;
    bench/bench_scale.py, 250 Buses in one process).
    """
    global _reported
    with _lock:
        moment = time.monotonic()
        if min_gap and moment - _taken[0] < min_gap:
            return []
        _taken[0] = moment
        now = _now()
        reports = _reports(now, _reported)
        _reported = now
    return [msgspec.json.encode(report) for report in reports]


def interval_s() -> float:
    """Seconds between reports: ``$HOOKBUS_COUNTERS_INTERVAL_S`` if set and a number, else the default."""
    text = os.environ.get(INTERVAL_ENV, "")
    try:
        return float(text) if text.strip() else DEFAULT_INTERVAL_S
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g", INTERVAL_ENV, text, DEFAULT_INTERVAL_S)
        return DEFAULT_INTERVAL_S


class CountersReporter:
    """Sends this process's counters over ``bus`` every ``interval_s`` and once more at close.

    Every Bus has one, but a process reports once per interval, through
    whichever timer fires first; a closing Bus always sends what is left.
    """

    def __init__(self, bus: Port, interval: float | None = None) -> None:
        self._bus = bus
        self._interval = interval_s() if interval is None else interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> CountersReporter:
        if self._interval > 0:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="hookbus-counters")
        return self

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            # Another Bus of the process may have reported within this interval: then there is nothing to add.
            await self._send(take_reports(min_gap=self._interval / 2))

    async def send(self) -> None:
        """Publish what was counted since the last report (on the fast path: a failure is a counted drop)."""
        await self._send(take_reports())

    async def _send(self, reports: list[bytes]) -> None:
        subject = counters_subject(self._bus.journal_origin)
        for data in reports:
            await self._bus.push(subject, data)

    async def close(self) -> None:
        """Stop the timer and send the last counts (a `hookbus emit` that dropped for depth reports it here)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        await self.send()
