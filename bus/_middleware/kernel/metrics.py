"""Middleware metrics per (handler, stage): calls by outcome, decisions, latency.

Counted on the kernel side for every reaction, including neutral continues
that the journal skips. Like the bus counters they are plain integers updated
in place (a histogram is a list of bucket counts) and turned into Prometheus
families only when scraped, so an intercept does not pay a metric lock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from bus._runtime.stats import PREFIX, LabelCap

#: Seconds; a handler's timeout is at most 30 s.
BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Series:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.count = 0
        self.sum = 0.0


def _copy(series: _Series) -> _Series:
    out = _Series()
    out.buckets, out.count, out.sum = list(series.buckets), series.count, series.sum
    return out


def _add(mine: _Series, other: _Series) -> _Series:
    mine.buckets = [a + b for a, b in zip(mine.buckets, other.buckets, strict=True)]
    mine.count += other.count
    mine.sum += other.sum
    return mine


#: Distinct quiet runs kept apart before they are counted into the handlers' series.
QUIET_RUNS: Final = 256


class MiddlewareStats(Collector):
    """Process-wide middleware counters (registered explicitly, see :mod:`bus._metrics`)."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str, str], int] = {}  # (handler, stage, outcome)
        self._decisions: dict[tuple[str, str, str], int] = {}  # (handler, stage, decision)
        self.fail_closed: dict[tuple[str, str], int] = {}  # (handler, stage)
        self._latency: dict[tuple[str, str], _Series] = {}
        #: Runs of rules evaluated together, all quiet: (stage, handlers) -> one series for them all.
        self._quiet: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, ...], _Series]] = {}
        #: The same series by (id of the handlers' tuple, stage), the tuple kept with it (alive: its id stays its
        #: own): a run's names are one tuple on every call, so the call hashes two values, not a hundred names.
        self._quiet_ids: dict[tuple[int, str], tuple[tuple[str, ...], _Series]] = {}
        self._handler = LabelCap()

    @property
    def calls(self) -> dict[tuple[str, str, str], int]:
        """(handler, stage, outcome) -> calls, the quiet runs counted in (a copy: read, never write)."""
        return self._with_quiet(self._calls, "ok")

    @property
    def decisions(self) -> dict[tuple[str, str, str], int]:
        """(handler, stage, decision) -> reactions, the quiet runs counted in (a copy)."""
        return self._with_quiet(self._decisions, "continue")

    def _with_quiet(self, counts: dict[tuple[str, str, str], int], label: str) -> dict[tuple[str, str, str], int]:
        """A copy of ``counts`` with each quiet run's calls added under (handler, stage, ``label``)."""
        out = dict(counts)
        for (stage, _), (names, series) in list(self._quiet.items()):
            for name in names:
                key = (name, stage, label)
                out[key] = out.get(key, 0) + series.count
        return out

    @property
    def latency(self) -> dict[tuple[str, str], _Series]:
        """(handler, stage) -> latency series, the quiet runs counted in (copies)."""
        out = {key: _copy(series) for key, series in list(self._latency.items())}
        for (stage, _), (names, series) in list(self._quiet.items()):
            for name in names:
                mine = out.get((name, stage))
                out[(name, stage)] = _copy(series) if mine is None else _add(mine, series)
        return out

    def reset(self) -> None:
        """Start over: no series, and the handler label cap empty (a test suite starts each test so, since
        the cap is per process and a suite names more handlers than one process of a deployment)."""
        self._calls.clear()
        self._decisions.clear()
        self.fail_closed.clear()
        self._latency.clear()
        self._quiet.clear()
        self._quiet_ids.clear()
        self._handler = LabelCap()

    def observe(
        self, handler: str, stage: str, outcome: str, decision: str, seconds: float | None, count: int = 1
    ) -> None:
        """``count`` alike reactions: ``outcome`` (ok, timeout, failed, ...) and what it read as (``decision``)."""
        handler = self._handler(handler)
        key = (handler, stage, outcome)
        self._calls[key] = self._calls.get(key, 0) + count
        dkey = (handler, stage, decision)
        self._decisions[dkey] = self._decisions.get(dkey, 0) + count
        if outcome != "ok" and decision == "cancel":
            pair = (handler, stage)
            self.fail_closed[pair] = self.fail_closed.get(pair, 0) + count
        if seconds is not None:
            series = self._latency.get((handler, stage))
            if series is None:
                series = self._latency[(handler, stage)] = _Series()
            series.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
            series.count += 1
            series.sum += seconds

    def observe_continues(self, stage: str, done: Sequence[tuple[str, float]]) -> None:
        """Handlers' ok continues on one stage, each ``(handler, seconds)``: as one ``observe`` each, in one pass
        (a stage of many rules counts its quiet ones so)."""
        cap, calls, decisions, latency = self._handler, self._calls, self._decisions, self._latency
        for who, seconds in done:
            handler = cap(who)
            key = (handler, stage, "ok")
            calls[key] = calls.get(key, 0) + 1
            dkey = (handler, stage, "continue")
            decisions[dkey] = decisions.get(dkey, 0) + 1
            series = latency.get((handler, stage))
            if series is None:
                series = latency[(handler, stage)] = _Series()
            series.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
            series.count += 1
            series.sum += seconds

    def observe_quiet(self, stage: str, handlers: tuple[str, ...], seconds: float) -> None:
        """A run of rules evaluated together, every one an ok continue taking ``seconds``: one series for the run
        (the readers count it in per handler), so a stage of many rules pays one count per call, not one each."""
        fast = self._quiet_ids.get((id(handlers), stage))
        if fast is not None and fast[0] is handlers:
            series = fast[1]
        else:
            key = (stage, handlers)
            kept = self._quiet.get(key)
            if kept is None:
                if len(self._quiet) >= QUIET_RUNS:
                    self._fold()
                kept = self._quiet[key] = (tuple(self._handler(name) for name in handlers), _Series())  # capped once
            series = kept[1]
            if len(self._quiet_ids) >= 4 * QUIET_RUNS:
                self._quiet_ids.clear()
            self._quiet_ids[(id(handlers), stage)] = (handlers, series)
        series.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        series.count += 1
        series.sum += seconds

    def _fold(self) -> None:
        """Count the quiet runs into the per-handler series (on the event loop, the one writer)."""
        calls, decisions, latency = self.calls, self.decisions, self.latency
        self._calls, self._decisions, self._latency = calls, decisions, latency
        self._quiet = {}
        self._quiet_ids = {}

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        # dict() copies are single C calls, atomic under the GIL: no lock against the event loop.
        calls, decisions, fail_closed = dict(self.calls), dict(self.decisions), dict(self.fail_closed)
        latency = {key: (list(s.buckets), s.sum) for key, s in dict(self.latency).items()}
        counters: list[tuple[str, str, list[str], dict[Any, int]]] = [
            ("calls", "Middleware handler calls by outcome (ok, timeout, failed, absent, invalid, untrusted, ...).",
             ["handler", "stage", "outcome"], calls),
            ("decisions", "What each reaction read as: continue, cancel or patch.",
             ["handler", "stage", "decision"], decisions),
            ("fail_closed_cancels", "Faults of fail_closed handlers that cancelled the action.",
             ["handler", "stage"], fail_closed),
        ]  # fmt: skip
        for name, doc, labels, values in counters:
            family = CounterMetricFamily(f"{PREFIX}_middleware_{name}", doc, labels=labels)
            for key, value in sorted(values.items()):
                family.add_metric(list(key), value)
            yield family
        histogram = HistogramMetricFamily(
            f"{PREFIX}_middleware_duration_seconds",
            "Middleware handler latency seen by the kernel.",
            labels=["handler", "stage"],
        )
        for pair, (buckets, total) in sorted(latency.items()):
            cumulative: list[tuple[str, float]] = []
            running = 0
            for bound, count in zip([*map(str, BUCKETS), "+Inf"], buckets, strict=True):
                running += count
                cumulative.append((bound, running))
            histogram.add_metric(list(pair), cumulative, total)
        yield histogram


#: The process's middleware metrics (registered by bus._metrics.register_collectors).
MIDDLEWARE: Final = MiddlewareStats()
