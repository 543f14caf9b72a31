"""``hookbus test-module FILE STAGE [JSON]`` and ``hookbus test-module FILE info``: a module file, no bus needed.

Runs the module's chain for one call in this process (on the in-process
broker of :class:`bus.testing.TestBus`: the kernel's and the module's own code,
no nats-server) and prints the decision and the journal entries the call
would write. Its handlers count as approved in declaration order, so equal
priorities run in that order, as they would once approved one by one.
``info`` lists the handlers: stage, chain position, fail mode, priority,
``when``, bag ports, references and identity. agent_os's ``hook_tool``
commands (``user "text"``, ``turn q a``, ``tool NAME JSON`` ...:
:mod:`bus._cli.hook_tool`) run their point with its payload built, and
``--db PATH`` sets every handler's ``ctx.config["db_path"]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from bus._cli.common import add_nats_url, read_json_object
from bus._cli.hook_tool import COMMANDS as HOOK_TOOL_COMMANDS
from bus._cli.hook_tool import call as hook_tool_call
from bus._cli.middleware import declaration_terms
from bus._core.decisions import Cancel, Decision, Patch
from bus._core.declaration import Declaration
from bus._core.errors import BrokenChain, ConfigError
from bus._core.stages import validate_stage
from bus._middleware.kernel.chain import order_with_bag
from bus._middleware.kernel.view import View
from bus._module import Module


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "test-module",
        help="run a module file's chain for one call in process (no bus), or list its handlers",
        description=(
            "Load FILE (FILE:NAME picks one bus.Module of several), run its chain of STAGE on the JSON payload "
            "(argument or stdin) as the kernel would, and print the decision and the journal entries it would "
            "write. 'hookbus test-module FILE info' lists its handlers, stages, order, when and identities."
        ),
    )
    parser.add_argument("target", metavar="FILE", help="a Python file defining a bus.Module (FILE:NAME for one)")
    parser.add_argument(
        "stage",
        help="the stage to run; 'info'; or an agent_os hook_tool command: " + ", ".join(HOOK_TOOL_COMMANDS),
    )
    parser.add_argument(
        "payload",
        nargs="*",
        default=[],
        help="the payload as a JSON object (default: stdin), or the command's arguments",
    )
    for field in ("agent", "user", "session", "template"):
        parser.add_argument(f"--{field}", default=None, help=f"the call's {field} (what when and grants see)")
    parser.add_argument(
        "--db", default=None, metavar="PATH", help="every handler's config db_path (ctx.config): a scratch database"
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="call over a real nats-server (--nats-url), the module served on the wire (a scratch server: it is "
        "announced there while this runs)",
    )
    add_nats_url(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from bus._cli.serve import load_module, split_target

    module = load_module(*split_target(args.target))
    if args.stage == "info":
        print("\n".join(describe(module)))
        return 0
    if args.stage in HOOK_TOOL_COMMANDS:
        stage, payload = hook_tool_call(args.stage, args.payload, args.agent)
    else:
        stage = validate_stage(args.stage)
        if len(args.payload) > 1:
            raise ConfigError(f"{stage}: one JSON payload, not {len(args.payload)} arguments")
        payload = read_json_object(args.payload[0] if args.payload else None, "the payload")
    if args.db is not None:
        module.configure({"db_path": args.db})
    ctx = {key: getattr(args, key) for key in ("agent", "user", "session", "template") if getattr(args, key)}
    if args.live:
        from bus._cli.module_live import run_live

        decision, entries = await run_live(args, module, stage, payload, ctx)
    else:
        decision, entries = await run_once(module, stage, payload, ctx)
    print(f"decision: {orjson.dumps(decision_wire(decision)).decode()}")
    print(f"journal: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
    for entry in entries:
        print(f"  {orjson.dumps(entry, option=orjson.OPT_SORT_KEYS).decode()}")
    return 0


async def run_once(
    module: Module, stage: str, payload: dict[str, Any], ctx: dict[str, str]
) -> tuple[Decision, list[dict[str, Any]]]:
    """One intercept of ``stage`` against ``module`` alone, its handlers approved in declaration order."""
    from bus._core.claim import DEFAULT_MAX_OBJECT_BYTES
    from bus._journal.subjects import JOURNAL_PREFIX
    from bus.testing import TestBus
    from bus.testing._broker import InProcessBroker

    #: No bus here: a payload up to the claim-check cap reaches the handlers whole (the 64 KiB limit is the bus's).
    local_max = DEFAULT_MAX_OBJECT_BYTES + 64 * 1024

    entries: list[dict[str, Any]] = []

    async def keep(msg: Any) -> None:
        entry = orjson.loads(msg.data)
        for noise in ("time", "process"):  # this run's, not the handler's
            entry.pop(noise, None)
        entries.append(entry)

    async with TestBus(trust_new=False, broker=InProcessBroker(local_max), max_bytes=local_max) as bus:
        await bus.port.subscribe_raw(f"{JOURNAL_PREFIX}.>", keep)
        await bus.serve(module)
        view = await bus.middleware.start()
        for decl in module.declarations:
            await view.approve(decl, "test-module")
        await view.wait_until(lambda: all(view.trust_of(d).runs for d in module.declarations), 10)
        await view.wait_until(lambda: _settled(view, module), 10)
        decision = await bus.intercept(stage, payload, ctx)
        await bus.middleware.close()  # publishes the call's journal entries
        await bus.flush()
    return decision, entries


def _settled(view: View, module: Module) -> bool:
    """Every approval delivered: each handler is in its stage's chain, or that chain is broken (it says why)."""
    for decl in module.declarations:
        chain = view.chains.get(decl.stage)
        if chain is None or not (chain.broken or any(link.decl.qualname == decl.qualname for link in chain.links)):
            return False
    return True


def decision_wire(decision: Decision) -> dict[str, Any]:
    out = decision.to_wire()
    if isinstance(decision, Cancel) and decision.handler:
        out["handler"] = decision.handler
    if isinstance(decision, Patch):
        out["payload"] = decision.payload
    return out


def describe(module: Module) -> list[str]:
    """Per stage, the module's handlers in chain order (declaration order breaking ties), each with its fields."""
    decls = module.declarations
    first = {decl.qualname: float(index) for index, decl in enumerate(decls)}
    lines = [f"module {module.name}: {len(decls)} handler{'s' if len(decls) != 1 else ''}"]
    for stage in sorted({decl.stage for decl in decls}):
        on_stage = [decl for decl in decls if decl.stage == stage]
        known = {ref for decl in decls for ref in (*decl.before, *decl.after)}  # other modules' handlers too
        try:
            ordered, note = order_with_bag(stage, on_stage, known, first)
        except BrokenChain as exc:
            lines.append(f"{stage}  BROKEN: {exc.reason}")
            ordered = on_stage
        else:
            lines.append(f"{stage}  ({note})" if note else stage)
        lines += [f"  {position}. {_describe(decl)}" for position, decl in enumerate(ordered, 1)]
    return lines


def _describe(decl: Declaration) -> str:
    parts = [decl.qualname, *declaration_terms(decl, decl.match or ())]
    if decl.outputs:
        parts.append(f"writes {','.join(decl.outputs)}")
    for item in decl.inputs:
        parts.append(f"reads {item.key} ({'required' if item.required else f'default {item.default!r}'})")
    parts.append(f"identity {decl.identity()}")
    return "  ".join(parts)
