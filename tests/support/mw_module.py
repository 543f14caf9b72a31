"""A middleware module run as a real process by the tests: ``tests/support/mw_module.py URL NAME STAGE [options]``.

Prints ``ready`` once it serves. Behaviours: ``continue`` (default), ``count``
(patches ``{"served_by": pid}``), ``cancel``, ``guard`` (cancels a command
containing ``rm -rf``, patches ``{"served_by": pid}`` otherwise). SIGTERM stops
it cleanly (as a service manager would); ``--code`` gives the handler another
identity (a changed version).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

from bus import Cancel, Continue, Decision, Module, Patch


def build(args: argparse.Namespace) -> Module:
    module = Module(args.name, heartbeat=None if args.announce_once else args.heartbeat)

    @module.stage(
        args.stage,
        fail_closed=args.fail_closed,
        timeout=args.timeout,
        name=args.handler,
        after=args.after,
        code=args.code,
    )
    async def handler(stage: str, payload: dict[str, Any]) -> Decision:
        if args.behaviour == "cancel":
            return Cancel("denied by the process")
        if args.behaviour == "guard":
            if "rm -rf" in str(payload.get("input", {}).get("command", "")):
                return Cancel("only by hand")
            return Patch({**payload, "served_by": os.getpid()})
        if args.behaviour == "count":
            await asyncio.sleep(0.01)  # the scenario: a handler that takes a moment, so replicas share the load
            return Patch({**payload, "served_by": os.getpid()})
        return Continue()

    return module


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("stage")
    parser.add_argument("--handler", default="h")
    parser.add_argument("--behaviour", default="continue")
    parser.add_argument("--fail-closed", action="store_true")
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--announce-once", action="store_true")  # protocol 2: no heartbeat
    parser.add_argument("--after", action="append", default=[])
    parser.add_argument("--code", default=None)
    args = parser.parse_args()
    module = build(args)
    ready = asyncio.Event()
    task = asyncio.create_task(module.serve(args.url, ready=ready))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    await ready.wait()
    print("ready", flush=True)
    with contextlib.suppress(asyncio.CancelledError):
        await task


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
