"""``hookbus detach NAME``: end a gone fail-closed guard (``module`` or ``module.handler``).

A trusted fail-closed handler whose module is gone keeps cancelling its stage
until its module comes back or an operator detaches it here. Detaching is
journaled and announced as ``eva.module.detached``.
"""

from __future__ import annotations

import argparse
import getpass
import socket

from bus.cli.middleware import add_options, open_view
from bus.core.errors import MiddlewareError
from bus.core.stages import phase
from bus.core.subjects import MODULE_DETACHED
from bus.journal.entries import JournalEntry, publish_entry
from bus.middleware.guards import designates, detach


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "detach",
        help="end a gone fail-closed guard: its stage stops being cancelled",
        description=(
            "Detach NAME (module.handler, or a module for all its fail-closed handlers) whose module is gone. "
            "Until then every call its guard would see is cancelled. Refused while an instance is alive."
        ),
    )
    parser.add_argument("name", help="module.handler, or a module for all its fail-closed handlers")
    add_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    name = args.name
    async with open_view(args, "hookbus-detach") as (bus, view):
        alive = sorted(q for q, (decl, _) in view.declarations().items() if designates(name, decl))
        if alive:
            raise MiddlewareError(f"{', '.join(alive)} is alive: stop its module first (detach ends gone guards)")
        assert view.guards_kv is not None
        records = list(view.guards.values())
        gone = sorted({r.decl.qualname for r in records})
        done = await detach(view.guards_kv, records, name)
        if not done:
            raise MiddlewareError(f"no gone guard named {name!r} (recorded guards: {', '.join(gone) or 'none'})")
        by = f"{getpass.getuser()}@{socket.gethostname()}"
        for rec in done:
            decl = rec.decl
            cause = f"detached by {by}"
            entry = JournalEntry("middleware", decl.stage, phase(decl.stage), decl.qualname, "detached", cause)
            entry.identity = rec.identity
            await publish_entry(bus, entry)
            print(f"detached {decl.qualname} (stage {decl.stage}, identity {rec.identity[:12]})")
        for module in sorted({rec.decl.module for rec in done}):
            handlers = sorted(rec.decl.qualname for rec in done if rec.decl.module == module)
            await bus.emit(MODULE_DETACHED, {"module": module, "handlers": handlers, "reason": f"detached by {by}"})
        await bus.flush()
    return 0
