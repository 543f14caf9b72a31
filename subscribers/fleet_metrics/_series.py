"""The fleet's series: plain counts updated by the receiver, turned into Prometheus families at scrape time.

Like the bus counters (bus/_runtime/stats.py), a count is a dict update, not a
metric lock: the receiver counts every event that crosses the bus. Every
label value goes through a :class:`~bus._runtime.stats.LabelCap`, so hostile
senders cannot multiply the series.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from bus._runtime.stats import PREFIX

_Key = tuple[str, ...]
NAMESPACE: Final = f"{PREFIX}_fleet"


class FleetCounter:
    """One counter family: values by label tuple (an unlabelled one is always shown, at 0 before any count)."""

    __slots__ = ("doc", "labels", "name", "values")

    def __init__(self, name: str, doc: str, labels: Sequence[str] = ()) -> None:
        self.name = f"{NAMESPACE}_{name}"
        self.doc = doc
        self.labels = tuple(labels)
        self.values: dict[_Key, float] = {} if labels else {(): 0.0}

    def add(self, key: _Key, amount: float = 1) -> None:
        values = self.values
        values[key] = values.get(key, 0) + amount

    def total(self) -> float:
        return sum(dict(self.values).values())

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.doc, labels=list(self.labels))
        for key, value in sorted(dict(self.values).items()):
            family.add_metric(list(key), value)
        return family


class FleetHistogram:
    """One histogram family: bucket counts and sums by label tuple."""

    __slots__ = ("bounds", "doc", "labels", "name", "values")

    def __init__(self, name: str, doc: str, labels: Sequence[str], bounds: Sequence[float]) -> None:
        self.name = f"{NAMESPACE}_{name}"
        self.doc = doc
        self.labels = tuple(labels)
        self.bounds = tuple(bounds)
        self.values: dict[_Key, tuple[list[int], list[float]]] = {}

    def _series(self, key: _Key) -> tuple[list[int], list[float]]:
        series = self.values.get(key)
        if series is None:
            series = self.values[key] = ([0] * (len(self.bounds) + 1), [0.0])
        return series

    def observe(self, key: _Key, seconds: float) -> None:
        buckets, total = self._series(key)
        buckets[bisect.bisect_left(self.bounds, seconds)] += 1
        total[0] += seconds

    def add_buckets(self, key: _Key, counts: Sequence[int], seconds: float) -> None:
        """Add a sender's bucket counts (same bounds, plus +Inf) and their sum."""
        buckets, total = self._series(key)
        for index, count in enumerate(counts):
            buckets[index] += count
        total[0] += seconds

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.doc, labels=list(self.labels))
        for key, (buckets, total) in sorted(dict(self.values).items()):
            cumulative: list[tuple[str, float]] = []
            running = 0
            for bound, count in zip([*map(str, self.bounds), "+Inf"], list(buckets), strict=True):
                running += count
                cumulative.append((bound, running))
            family.add_metric(list(key), cumulative, total[0])
        return family


class ReadCounter:
    """An unlabelled counter whose value is read at scrape time (from a Bus's own counters, say)."""

    __slots__ = ("doc", "name", "read")

    def __init__(self, name: str, doc: str, read: Callable[[], float]) -> None:
        self.name = f"{NAMESPACE}_{name}"
        self.doc = doc
        self.read = read

    def family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.doc, value=self.read())


class FleetCollector(Collector):
    """Exposes a set of fleet series on /metrics."""

    def __init__(self, series: Iterable[FleetCounter | FleetHistogram | ReadCounter]) -> None:
        self.series = tuple(series)

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        for one in self.series:
            yield one.family()
