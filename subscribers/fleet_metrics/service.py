"""What ``hookbus up`` runs from this package: the fleet-metrics receiver, sharing its queue group.

The receiver has a connection of its own: under a flood it may fall behind
until the server cuts it as a slow consumer, and that cut must not take the
shell hooks', triggers' and journal's buffered messages with it. What it lost
is counted (``hookbus_fleet_receiver_*``, docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from bus.service import ServiceContext
from subscribers.fleet_metrics.asks_queue import AskQueue
from subscribers.fleet_metrics.receiver import QUEUE, FleetReceiver

#: The client name of the receiver's connection (shown by the server's monitoring).
CONNECTION_NAME: Final = "hookbus-up-fleet-metrics"


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """Derive the fleet's metrics from the bus while it is up (served on ``hookbus up``'s /metrics)."""
    async with ctx.connect(CONNECTION_NAME) as bus:
        receiver = await FleetReceiver(bus).start()
        asks = await AskQueue(bus).start()  # the asks queue, from its bucket and the journal
        ctx.lines.append(f"  fleet    metrics of every process, from the bus (queue group {QUEUE}, own connection)")
        try:
            yield
        finally:
            await asks.stop()
            await receiver.stop()
