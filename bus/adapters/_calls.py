"""One way to reach the bus from a framework callback, whether it holds a Bus or a SyncBus.

Async framework code awaits a :class:`bus._client.Bus` directly, or a
:class:`bus.sync.SyncBus` on a worker thread; sync code needs a SyncBus (an
asyncio Bus cannot be waited for from a thread that is not its loop's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, TypeAlias

from bus._client import Bus
from bus._core.decisions import Decision
from bus._core.errors import SyncCallError
from bus.sync import SyncBus

#: What an adapter is given to reach the bus.
AnyBus: TypeAlias = Bus | SyncBus


def need_sync(bus: AnyBus, what: str) -> SyncBus:
    """The SyncBus a synchronous callback needs; a plain Bus is refused with what to use instead."""
    if isinstance(bus, SyncBus):
        return bus
    raise SyncCallError(f"{what} is synchronous: give it a SyncBus (bus.sync.SyncBus), not an asyncio Bus")


async def aemit(bus: AnyBus, subject: str, payload: Mapping[str, Any], session_id: str | None) -> bool:
    if isinstance(bus, SyncBus):
        return await asyncio.to_thread(bus.emit, subject, payload, session_id)
    return await bus.emit(subject, payload, session_id)


async def aintercept(bus: AnyBus, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None) -> Decision:
    if isinstance(bus, SyncBus):
        return await asyncio.to_thread(bus.intercept, stage, payload, ctx)
    return await bus.intercept(stage, payload, ctx)
