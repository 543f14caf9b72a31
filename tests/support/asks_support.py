"""Waiting for a held call's ask, as an operator would see it."""

from __future__ import annotations

from bus._middleware.asks.store import AskStore, Pending
from tests.support.waiting import wait_until


async def pending_ask(store: AskStore, session: str) -> Pending:
    """The ask of ``session`` once it is pending."""
    found: list[Pending] = []

    async def one() -> bool:
        found[:] = [item for item in await store.pending() if item.ask.session == session]
        return bool(found)

    await wait_until(one, what=f"an ask of {session}")
    return found[0]
