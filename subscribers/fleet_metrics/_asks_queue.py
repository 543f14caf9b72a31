"""The asks queue of the whole bus, as ``hookbus up`` serves it on /metrics (docs/metrics.md, "The fleet").

Gauges from the ``hookbus_asks`` bucket itself (read every ``POLL_S``), so
they hold for every agent whether or not it is scraped:

- ``hookbus_fleet_asks_pending``: asks waiting for an answer;
- ``hookbus_fleet_asks_oldest_age_seconds``: how long the oldest has waited;
- ``hookbus_fleet_asks_deadline_used_ratio``: the largest share of its own
  deadline any pending ask has used (0.5: half its time gone; the alert's).

Counters from the journal (what kernels write when an ask ends):
``hookbus_fleet_asks_answered_total{kind}`` (allow, deny, edit) and
``hookbus_fleet_asks_expired_total``, on a queue group of their own, so that
several ``hookbus up`` count each entry once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from bus._client import Bus
from bus._core.errors import HookbusError, JournalError
from bus._journal.entries import decode_entry
from bus._metrics import register_once
from bus._middleware.asks.records import ANSWER_KINDS
from bus._middleware.asks.store import AskStore
from subscribers.fleet_metrics._subjects import ASKS_JOURNAL, ASKS_QUEUE

log = logging.getLogger("hookbus.asks")

#: Seconds between reads of the bucket.
POLL_S: Final = 5.0
#: Where kernels journal how each ask ended, and the queue group that counts each entry once.
JOURNAL: Final = ASKS_JOURNAL
QUEUE: Final = ASKS_QUEUE
#: A kernel's journal decision at an ask's end -> the answer kind.
_ENDED: Final = {"allowed": "allow", "denied": "deny", "edited": "edit"}


class AskQueue(Collector):
    """The bus's pending asks (read from the bucket) and how asks ended (counted from the journal)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.pending = 0
        self.oldest_age_s = 0.0
        self.deadline_used = 0.0
        self.answered = dict.fromkeys(ANSWER_KINDS, 0)  # at 0 from the start: the first answer is a rise
        self.expired = 0
        self._task: asyncio.Task[None] | None = None
        self._subs: list[Any] = []

    async def start(self, registry: CollectorRegistry | None = REGISTRY) -> AskQueue:
        await self.read()
        self._subs = [await self._bus.port.subscribe_raw(subject, self._entry, queue=QUEUE) for subject in JOURNAL]
        self._task = asyncio.create_task(self._poll())
        if registry is not None:
            register_once((self,), registry)
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sub in self._subs:
            with contextlib.suppress(HookbusError):
                await sub.unsubscribe()

    async def read(self) -> None:
        """Read the bucket's pending asks now."""
        try:
            pending = await AskStore(self._bus.port).pending()
        except HookbusError as exc:
            log.debug("asks queue: %s", exc)
            return
        now = time.time()
        self.pending = len(pending)
        self.oldest_age_s = max((now - item.ask.asked_at for item in pending), default=0.0)
        self.deadline_used = max(
            ((now - item.ask.asked_at) / max(item.ask.deadline - item.ask.asked_at, 1e-3) for item in pending),
            default=0.0,
        )

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            await self.read()

    async def _entry(self, msg: Any) -> None:
        try:
            entry = decode_entry(msg.data, msg.subject)
        except JournalError:
            return
        if entry.kind != "middleware":
            return
        if entry.decision in _ENDED:
            self.answered[_ENDED[entry.decision]] += 1
        elif entry.decision == "expired":
            self.expired += 1

    def collect(self) -> Iterable[Any]:
        prefix = "hookbus_fleet_asks"
        yield GaugeMetricFamily(f"{prefix}_pending", "Asks waiting for an answer, bus-wide.", value=self.pending)
        yield GaugeMetricFamily(
            f"{prefix}_oldest_age_seconds", "How long the oldest pending ask has waited.", value=self.oldest_age_s
        )
        yield GaugeMetricFamily(
            f"{prefix}_deadline_used_ratio",
            "The largest share of its deadline a pending ask has used (0: none pending).",
            value=self.deadline_used,
        )
        answered = CounterMetricFamily(f"{prefix}_answered", "Asks answered, by kind (journal).", labels=["kind"])
        for kind, count in self.answered.items():
            answered.add_metric([kind], count)
        yield answered
        yield CounterMetricFamily(f"{prefix}_expired", "Asks whose deadline came first (journal).", value=self.expired)
