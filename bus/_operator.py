"""What an operator does to the middleware, journaled: approve or reject a waiting handler, detach a gone guard.

``hookbus approve`` / ``reject`` / ``detach`` and the console call these same
functions; ``actor`` says who acted (``user@host`` for the CLI, ``console``
for the browser) and ends up in each journal entry's cause.
"""

from __future__ import annotations

import getpass
import socket
from typing import Final

from bus._client import Bus
from bus._core.declaration import Declaration
from bus._core.errors import MiddlewareError
from bus._core.stages import phase
from bus._core.subjects import MODULE_DETACHED
from bus._journal.entries import JournalEntry, publish_entry
from bus._middleware.guards import GuardRecord, designates, detach
from bus._middleware.kernel.approvals import approve, select
from bus._middleware.kernel.view import View
from bus._middleware.registry import TRUST_BUCKET, open_bucket
from bus._middleware.rejections import add_rejection

#: The journal decisions of operators' actions: on middleware handlers, and on hooks.json through the API.
OPERATOR_DECISIONS: Final = ("approved", "rejected", "detached", "created", "updated", "deleted", "enabled", "disabled")


def local_actor() -> str:
    """``user@host``: who runs this process, as the CLI names the operator."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


async def approve_journaled(bus: Bus, view: View, name: str, actor: str) -> list[Declaration]:
    """Approve the waiting handlers ``name`` designates; journal each as ``approved by <actor>``."""
    approved = await approve(view, name)
    await _journal_decisions(bus, approved, "approved", actor)
    return approved


async def reject_journaled(bus: Bus, view: View, name: str, actor: str) -> list[Declaration]:
    """Reject the waiting versions ``name`` designates; journal each as ``rejected by <actor>``.

    They leave the approval queue and are never called; a new version (another identity) waits again.
    """
    chosen = select(view, name)
    kv = await open_bucket(bus.port, TRUST_BUCKET)
    for decl in chosen:
        await add_rejection(kv, decl, actor)
    await _journal_decisions(bus, chosen, "rejected", actor)
    return chosen


async def _journal_decisions(bus: Bus, decls: list[Declaration], decision: str, actor: str) -> None:
    """One journal entry per handler version an operator decided on: ``<decision> by <actor>``, with its identity."""
    for decl in decls:
        entry = JournalEntry("middleware", decl.stage, phase(decl.stage), decl.qualname, decision)
        entry.cause = f"{decision} by {actor}"
        entry.identity = decl.identity()
        await publish_entry(bus.port, entry)
    await bus.flush()


async def detach_journaled(bus: Bus, view: View, name: str, actor: str) -> list[GuardRecord]:
    """Detach the gone fail-closed guards ``name`` designates; journal each and announce eva.module.detached.

    Refused (MiddlewareError) while an instance of one of them is alive, or when none matches.
    """
    alive = sorted(q for q, (decl, _) in view.declarations().items() if designates(name, decl))
    if alive:
        raise MiddlewareError(f"{', '.join(alive)} is alive: stop its module first (detach ends gone guards)")
    if view.guards_kv is None:
        raise MiddlewareError("the middleware view is not started: nothing to detach")
    records = list(view.guards.values())
    gone = sorted({r.decl.qualname for r in records})
    done = await detach(view.guards_kv, records, name)
    if not done:
        raise MiddlewareError(f"no gone guard named {name!r} (recorded guards: {', '.join(gone) or 'none'})")
    cause = f"detached by {actor}"
    for rec in done:
        decl = rec.decl
        entry = JournalEntry("middleware", decl.stage, phase(decl.stage), decl.qualname, "detached", cause)
        entry.identity = rec.identity
        await publish_entry(bus.port, entry)
    for module in sorted({rec.decl.module for rec in done}):
        handlers = sorted(rec.decl.qualname for rec in done if rec.decl.module == module)
        await bus.emit(MODULE_DETACHED, {"module": module, "handlers": handlers, "reason": cause})
    await bus.flush()
    return done
