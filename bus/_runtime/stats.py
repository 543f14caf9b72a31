"""Counters of one Bus, and their export to Prometheus.

The counters are plain integers in dicts so that ``emit`` and message delivery
pay a dict update, not a metric lock. A process-wide collector (registered explicitly, see
:mod:`bus._metrics`) reads every live Bus (plus the totals of closed ones, so counters never go down) at scrape time.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

PREFIX: Final = "hookbus"
#: Label values kept per counter before new ones fold into "other".
MAX_LABELS: Final = 256
OTHER: Final = "other"

#: Why an event did not reach the wire or a handler (docs/metrics.md; the fleet series start each at 0).
DROP_REASONS: Final = (
    "depth",
    "oversize",
    "disconnected",
    "malformed",
    "slow_consumer",
    "closed",
    "journal",
    "denied",
    "shed",
)
#: Why a receiver refuses an event (bus._core.errors.EnvelopeError.drop).
REFUSE_REASONS: Final = ("malformed", "oversize", "depth")


#: A label value that is missing or not a string.
UNKNOWN: Final = "unknown"


class LabelCap:
    """The one label capper: keeps at most ``limit`` distinct values of a label; later ones become ``other``.

    A value that is not a non-empty string is ``unknown``. Metrics keyed by
    what senders choose (subjects, handler, model and tool names) go through
    one, so a flood of new names cannot blow up the series count.
    """

    __slots__ = ("_seen", "limit")

    def __init__(self, limit: int = MAX_LABELS) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: object) -> str:
        text = value if isinstance(value, str) and value else UNKNOWN
        if text in self._seen:
            return text
        if len(self._seen) >= self.limit:
            return OTHER
        self._seen.add(text)
        return text


class LabelledCounter(Counter[str]):
    """A Counter whose labels go through a LabelCap; extra labels count as ``other``."""

    def __init__(self) -> None:
        super().__init__()
        self._cap = LabelCap()

    def add(self, label: str, amount: int = 1) -> None:
        self[self._cap(label)] += amount


class BusStats:
    """What one Bus did: emitted, delivered, dropped (by reason), failed."""

    def __init__(self) -> None:
        self.emitted = LabelledCounter()
        self.delivered = LabelledCounter()
        self.dropped = LabelledCounter()
        self.handler_errors = LabelledCounter()
        self.truncated = 0
        #: Oversized events whose payload went whole to the object store (the envelope carries a reference).
        self.claimed = 0
        self.disconnects = 0
        self.reconnects = 0

    def merge(self, other: BusStats) -> None:
        """Add ``other``'s counts to these."""
        for mine, theirs in self._counters(other):
            # dict() is one C call, atomic under the GIL: the event loop may be counting meanwhile.
            for label, value in dict(theirs).items():
                mine.add(label, value)
        self.truncated += other.truncated
        self.claimed += other.claimed
        self.disconnects += other.disconnects
        self.reconnects += other.reconnects

    def _counters(self, other: BusStats) -> Iterator[tuple[LabelledCounter, LabelledCounter]]:
        yield self.emitted, other.emitted
        yield self.delivered, other.delivered
        yield self.dropped, other.dropped
        yield self.handler_errors, other.handler_errors


class _BusCollector(Collector):
    """Sums the stats of every Bus in the process at scrape time."""

    def __init__(self) -> None:
        self._live: weakref.WeakSet[BusStats] = weakref.WeakSet()
        self._retired = BusStats()
        self._lock = threading.Lock()

    def track(self, stats: BusStats) -> None:
        with self._lock:
            self._live.add(stats)

    def retire(self, stats: BusStats) -> None:
        with self._lock:
            if stats in self._live:
                self._live.discard(stats)
                self._retired.merge(stats)

    def total(self) -> BusStats:
        total = BusStats()
        with self._lock:
            total.merge(self._retired)
            for stats in list(self._live):
                total.merge(stats)
        return total

    def collect(self) -> Iterable[CounterMetricFamily]:
        total = self.total()
        yield _family("events_emitted", "Events published by emit, by subject.", "subject", total.emitted)
        yield _family(
            "events_delivered", "Events handed to a subscriber handler, by subject.", "subject", total.delivered
        )
        yield _family("events_dropped", "Events not published or not delivered, by reason.", "reason", total.dropped)
        yield _family("handler_errors", "Subscriber handlers that raised, by subject.", "subject", total.handler_errors)
        yield _plain("events_truncated", "Oversized events whose strings were cut to fit.", total.truncated)
        yield _plain("events_claimed", "Oversized events kept whole in the object store.", total.claimed)
        yield _plain("nats_disconnects", "Times a client lost its NATS connection.", total.disconnects)
        yield _plain("nats_reconnects", "Times a client reconnected to NATS.", total.reconnects)


def _family(name: str, doc: str, label: str, values: Counter[str]) -> CounterMetricFamily:
    family = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=[label])
    for value, count in sorted(values.items()):
        family.add_metric([value], count)
    return family


def _plain(name: str, doc: str, count: int) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=count)


#: The process-wide collector of every Bus's counters (registered by bus._metrics.register_collectors).
COLLECTOR: Final = _BusCollector()
