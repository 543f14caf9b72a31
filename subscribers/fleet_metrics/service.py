"""What ``hookbus up`` runs from this package: the fleet-metrics receiver, sharing its queue group.

The receiver has a connection of its own: under a flood it may fall behind
until the server cuts it as a slow consumer, and that cut must not take the
shell hooks', triggers' and journal's buffered messages with it. What it lost
is counted (``hookbus_fleet_receiver_*``, docs/metrics.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

from bus.middleware.kernel.view import View
from bus.middleware.trust import Managed
from bus.service import ServiceContext
from subscribers.fleet_metrics import known
from subscribers.fleet_metrics.metrics import FleetMetrics
from subscribers.fleet_metrics.receiver import QUEUE, FleetReceiver

#: The client name of the receiver's connection (shown by the server's monitoring).
CONNECTION_NAME: Final = "hookbus-up-fleet-metrics"
#: How often the series of hooks, triggers and handlers that appeared since are put at zero (a scrape is 15 s).
KNOWN_EVERY_S: Final = 5.0


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """Derive the fleet's metrics from the bus while it is up (served on ``hookbus up``'s /metrics)."""
    async with ctx.connect(CONNECTION_NAME) as bus:
        receiver = await FleetReceiver(bus).start()
        view = View(bus, managed=Managed.of(()), trust_new=False, aliases={})  # reads; reports nothing
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
            await receiver.stop()


async def _known(fleet: FleetMetrics, workspace: Path, view: View) -> None:
    """Hooks, triggers and handlers added while the bus runs start at zero too (adding 0 twice is nothing)."""
    while True:
        await asyncio.sleep(KNOWN_EVERY_S)
        known.from_workspace(fleet, workspace)
        known.from_view(fleet, view)
