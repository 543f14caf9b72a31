"""What ``hookbus up`` runs from this package: the fleet-metrics receiver, sharing its queue group."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bus.service import ServiceContext
from subscribers.fleet_metrics.receiver import QUEUE, FleetReceiver


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """Derive the fleet's metrics from the bus while it is up (served on ``hookbus up``'s /metrics)."""
    receiver = await FleetReceiver(ctx.bus).start()
    ctx.lines.append(f"  fleet    metrics of every process, from the bus (queue group {QUEUE})")
    try:
        yield
    finally:
        await receiver.stop()
