"""The fleet-metrics receiver: events, journal entries and counters reports off the bus, into the fleet's series.

Every subscription is in the queue group ``hookbus-fleet-metrics``: ``hookbus
up`` and any number of ``hookbus metrics`` processes share the messages, each
counted by one of them (sum the instances in Prometheus). Raw subscriptions:
counting an event is a decode and a dict update, no handler task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

from prometheus_client.registry import REGISTRY, CollectorRegistry

from bus._core.subjects import (
    COUNTERS_PREFIX,
    EVA_DOMAIN,
    PRX_DOMAIN,
    vouched_pattern,
)
from bus._journal.subjects import JOURNAL_PREFIX
from bus._metrics import register_once
from bus._middleware.kernel.view import View
from bus._middleware.trust import Managed
from bus._service import ServiceContext
from bus._transport.port import Port, RawMessage, RawSubscription, unsubscribe_all
from subscribers.fleet_metrics import _known as known
from subscribers.fleet_metrics._asks_queue import AskQueue
from subscribers.fleet_metrics._feeders import count_entry, event_counter
from subscribers.fleet_metrics._fleet_series import FleetMetrics
from subscribers.fleet_metrics._reports import apply_report
from subscribers.fleet_metrics._series import FleetCollector, ReadCounter
from subscribers.fleet_metrics._subjects import FLEET_METRICS_QUEUE

QUEUE: Final = FLEET_METRICS_QUEUE
#: Messages a subscription holds before NATS-side drops: a 100k-event burst waits, it is not lost.
PENDING_MSGS: Final = 500_000
#: The event subjects counted: hookbus's two domains (the permissions of the bus user, too).
_PLAIN: Final = (f"{PRX_DOMAIN}.>", f"{EVA_DOMAIN}.>")
#: The event subjects, plain and vouched (hookbus.from.<user>.<subject>, docs/protocol.md#publisher-identity).
EVENT_PATTERNS: Final = _PLAIN + tuple(mirror for mirror in map(vouched_pattern, _PLAIN) if mirror is not None)


class FleetReceiver:
    """Feeds a :class:`FleetMetrics` from ``bus`` while started."""

    def __init__(
        self, bus: Port, fleet: FleetMetrics | None = None, registry: CollectorRegistry | None = REGISTRY
    ) -> None:
        self.bus = bus
        self.fleet = fleet or FleetMetrics()
        self._registry = registry  # None: not exposed (tests, embedding)
        self._subs: list[RawSubscription] = []
        stats = bus.stats
        #: What this receiver's own connection lost: a cut drops whatever the server held for it.
        self.loss = FleetCollector(
            (
                ReadCounter(
                    "receiver_disconnects",
                    "Times this fleet receiver's connection was lost (a slow-consumer cut loses what the server held).",
                    lambda: stats.disconnects,
                ),
                ReadCounter(
                    "receiver_dropped",
                    "Messages this fleet receiver dropped itself, over its pending limit (slow consumer).",
                    lambda: stats.dropped["slow_consumer"],
                ),
            )
        )

    async def start(self) -> FleetReceiver:
        """Subscribe (in the shared queue group) and expose the series on the registry."""
        if self._registry is not None:
            register_once((self.fleet.collector, self.loss), self._registry)
        bus = self.bus
        on_event = event_counter(self.fleet, bus.max_bytes, bus.max_depth)
        for pattern in EVENT_PATTERNS:
            self._subs.append(await bus.subscribe_raw(pattern, on_event, queue=QUEUE, pending_msgs_limit=PENDING_MSGS))
        for pattern in (f"{JOURNAL_PREFIX}.>",):
            self._subs.append(
                await bus.subscribe_raw(pattern, self._on_entry, queue=QUEUE, pending_msgs_limit=PENDING_MSGS)
            )
        for pattern in (COUNTERS_PREFIX, f"{COUNTERS_PREFIX}.>"):
            self._subs.append(await bus.subscribe_raw(pattern, self._on_report, queue=QUEUE))
        await bus.flush()
        return self

    async def _on_entry(self, msg: RawMessage) -> None:
        count_entry(self.fleet, msg.subject, msg.data)

    async def _on_report(self, msg: RawMessage) -> None:
        apply_report(self.fleet, msg.data)

    async def stop(self) -> None:
        """Unsubscribe (quietly if the connection is already gone)."""
        subs, self._subs = self._subs, []
        await unsubscribe_all(subs)


#: The client name of the receiver's connection in ``hookbus up`` (shown by the server's monitoring).
CONNECTION_NAME: Final = "hookbus-up-fleet-metrics"
#: How often the series of hooks, triggers and handlers that appeared since are put at zero (a scrape is 15 s).
KNOWN_EVERY_S: Final = 5.0


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """Derive the fleet's metrics from the bus while it is up (served on ``hookbus up``'s /metrics).

    The receiver has a connection of its own: under a flood it may fall behind
    until the server cuts it as a slow consumer, and that cut must not take the
    shell hooks', triggers' and journal's buffered messages with it. What it lost
    is counted (``hookbus_fleet_receiver_*``, docs/metrics.md).
    """
    async with ctx.connect(CONNECTION_NAME) as bus:
        receiver = await FleetReceiver(bus.port).start()
        asks = await AskQueue(bus).start()  # the asks queue, from its bucket and the journal
        view = View(bus.port, managed=Managed.of(()), trust_new=False, aliases={})  # reads; reports nothing
        await view.start()
        known.from_workspace(receiver.fleet, ctx.workspace)
        known.from_view(receiver.fleet, view)
        ctx.lines.append(f"  fleet    metrics of every process, from the bus (queue group {QUEUE}, own connection)")
        refreshing = asyncio.create_task(_known(receiver.fleet, ctx.workspace, view))
        try:
            yield
        finally:
            refreshing.cancel()
            await asyncio.gather(refreshing, return_exceptions=True)
            await view.stop()
            await asks.stop()
            await receiver.stop()


async def _known(fleet: FleetMetrics, workspace: Path, view: View) -> None:
    """Hooks, triggers and handlers added while the bus runs start at zero too (adding 0 twice is nothing)."""
    while True:
        await asyncio.sleep(KNOWN_EVERY_S)
        known.from_workspace(fleet, workspace)
        known.from_view(fleet, view)
