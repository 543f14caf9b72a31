"""``hookbus test-module ... --live``: the same call over a real nats-server, the module served on the wire.

The kernel here runs the module's handlers as managed (the operator's own:
no trust record is written), the module is served on a connection of its own,
and the call goes over the server as an agent's would: the wire protocol,
its limits and timeouts. Use a scratch server: the module is announced there
while the command runs, and other agents' kernels see it (untrusted) too.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import orjson

from bus._cli.options import command_bus
from bus._core.decisions import Decision
from bus._journal.subjects import JOURNAL_PREFIX
from bus._module import Module


async def run_live(
    args: argparse.Namespace, module: Module, stage: str, payload: dict[str, Any], ctx: dict[str, str]
) -> tuple[Decision, list[dict[str, Any]]]:
    """One intercept of ``stage`` through the server at ``--nats-url``, ``module`` served over it."""
    from bus.testing import wait_for_chain

    managed = [decl.qualname for decl in module.declarations]
    entries: list[dict[str, Any]] = []

    async def keep(msg: Any) -> None:
        entry = orjson.loads(msg.data)
        if entry.get("who") in managed:
            for noise in ("time", "process"):
                entry.pop(noise, None)
            entries.append(entry)

    async with command_bus(args, "hookbus-test-module", managed=managed) as kernel:
        await kernel.port.subscribe_raw(f"{JOURNAL_PREFIX}.>", keep)
        async with command_bus(args, f"hookbus-test-module-{module.name}") as served:
            serving = asyncio.create_task(module.serve(bus=served))
            try:
                on_stage = [decl.qualname for decl in module.declarations if decl.stage == stage]
                if on_stage:
                    await wait_for_chain(kernel, stage, on_stage)
                decision = await kernel.intercept(stage, payload, ctx)
                await kernel.middleware.close()  # publishes the call's journal entries
                await kernel.flush()
            finally:
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
    return decision, entries
