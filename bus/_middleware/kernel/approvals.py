"""The approval queue: live handlers that may not run yet, and approving them by name."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bus._core.declaration import Declaration
from bus._core.errors import MiddlewareError, RegistryError
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.view import View
from bus._middleware.registry import LOAD_WITHIN_S, TRUST_BUCKET, open_bucket
from bus._middleware.trust import TrustState, approved_identity
from bus._transport.port import Port


@dataclass(frozen=True, slots=True)
class Waiting:
    """A declared handler waiting for approval."""

    decl: Declaration
    state: TrustState  # Untrusted (never approved) or Modified (changed since approval)


async def approvals_held(port: Port) -> int:
    """How many handlers the bus's trust store approves: it lives in the bus's JetStream, not in a workspace."""
    kv = await open_bucket(port, TRUST_BUCKET)
    watch = await kv.watch()
    held = 0
    try:
        async with asyncio.timeout(LOAD_WITHIN_S):  # bounded, as every registry load
            async for entry in watch:
                if entry is None:
                    break
                held += approved_identity(entry.value) is not None
    except TimeoutError:
        raise RegistryError(f"the {TRUST_BUCKET} bucket did not load within {LOAD_WITHIN_S:g}s") from None
    finally:
        await watch.stop()
    return held


def queue(view: View) -> list[Waiting]:
    """Every live handler that is Untrusted or Modified (a version nobody approved), by name."""
    waiting = {link.decl.qualname: link for chain in view.chains.values() for link in chain.waiting}
    return [Waiting(waiting[name].decl, waiting[name].trust) for name in sorted(waiting)]


def rejected(view: View) -> list[Link]:
    """Every live version an operator rejected (out of the queue, never called), by name."""
    return sorted(
        (link for chain in view.chains.values() for link in chain.rejected), key=lambda one: one.decl.qualname
    )


def select(view: View, name: str) -> list[Declaration]:
    """The waiting handlers ``name`` designates: ``module.handler``, or ``module`` for all of its handlers."""
    chosen = [w.decl for w in queue(view) if name in (w.decl.qualname, w.decl.module)]
    if not chosen:
        known = ", ".join(w.decl.qualname for w in queue(view)) or "none"
        raise MiddlewareError(f"no handler named {name!r} is waiting for approval (waiting: {known})")
    return chosen


async def approve(view: View, name: str) -> list[Declaration]:
    """Approve the handlers ``name`` designates as they are declared now; return them."""
    chosen = select(view, name)
    for decl in chosen:
        await view.approve(decl)
    return chosen
