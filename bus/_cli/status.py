"""``hookbus status``: what is on the bus: agents, workers, modules and their handlers, trigger engines, sinks.

Processes are read from the presence bucket (each ``hookbus up``, ``worker``,
``journal-sink`` and ``agent`` renews its record every few seconds), modules
and their handlers from the middleware registry, with their trust state. Each
line says the hookbus or module version and when it was last heard of.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from bus._cli.middleware import add_options, open_view
from bus._cli.parser import add_command
from bus._cli.workspace import bus_name
from bus._runtime.visible import visible
from bus._status_report import SECTIONS, status_report


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "status",
        "list what is on the bus: agents, workers, modules and handlers, trigger engines, journal sinks",
        __doc__,
    )
    parser.add_argument("--json", action="store_true", help="one JSON object")
    add_options(parser)
    parser.set_defaults(func=run)


def ago(seconds: float) -> str:
    """``3s ago``, ``2m ago``, ``1h ago``."""
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.0f}h ago"


def lines_of(rows: dict[str, list[dict[str, Any]]], modules: list[dict[str, Any]]) -> list[str]:
    """The human listing: one section per kind of participant; modules with their handlers under them."""
    out: list[str] = []
    for kind, heading in SECTIONS.items():
        out.append(heading)
        for row in rows[kind]:
            silent = "  SILENT (not renewed: gone?)" if row["silent"] else ""
            out.append(
                f"  {visible(row['name'])}  hookbus {visible(row['version'])}  {visible(row['process'])} "
                f"{visible(row['where'])}  last seen {ago(row['last_seen_s'])}{silent}  {visible(row['detail'])}"
            )
        if not rows[kind]:
            out.append("  none")
        if kind == "agent":
            out.extend(_module_lines(modules))
    return out


def _module_lines(modules: list[dict[str, Any]]) -> list[str]:
    out = ["modules"]
    for module in modules:
        versions = ", ".join(sorted({i["version"] for i in module["instances"]}))
        seen = min(i["last_seen_s"] for i in module["instances"])
        count = len(module["instances"])
        out.append(
            f"  {module['name']}  version {versions}  {count} instance{'s' if count != 1 else ''}  "
            f"last seen {ago(seen)}"
        )
        for handler in module["handlers"]:
            mode = "fail-closed" if handler["fail_closed"] else "fail-open"
            state = handler["state"] if handler["runs"] else f"{handler['state']}: waiting for approval"
            out.append(f"    {handler['name']}  on {handler['stage']}  {mode}  {state}")
    if not modules:
        out.append("  none")
    return out


async def run(args: argparse.Namespace) -> int:
    async with open_view(args, "hookbus-status") as (bus, view):
        report = await status_report(bus, view)
        where = bus_name(bus.servers)
    if args.json:
        print(orjson.dumps({"nats": where, **report}).decode())
        return 0
    print(f"on {where}:")
    print("\n".join(lines_of(report, report["modules"])))
    for problem in report["problems"]:
        print(f"(ignored: {visible(problem)})")
    return 0
