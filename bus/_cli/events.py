"""``hookbus events``: the event catalog."""

from __future__ import annotations

import argparse

import orjson

from bus._core.catalog import CATALOG, FAMILIES
from bus._core.stages import DESCRIPTIONS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "events",
        help="list the catalogued events and their payload fields",
        description=(
            "List the events hookbus knows by name: subject, when it fires, payload fields with their JSON types "
            "(what 'hookbus emit --strict' checks). 'hookbus emit' refuses other subjects unless --any. "
            "Then the middleware stages the kernel knows by name (docs/stages.md has their payloads)."
        ),
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    if args.json:
        listing = {
            subject: {"description": spec.description, "fields": dict(spec.fields)} for subject, spec in CATALOG.items()
        }
        body = {"events": listing, "families": FAMILIES, "stages": DESCRIPTIONS}
        print(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
        return 0
    width = max(len(subject) for subject in [*CATALOG, *FAMILIES, *DESCRIPTIONS])
    for subject, spec in CATALOG.items():
        fields = ", ".join(f"{name}: {kind}" for name, kind in spec.fields.items())
        print(f"{subject:<{width}}  {spec.description}" + (f"  [{fields}]" if fields else ""))
    for pattern, description in FAMILIES.items():
        print(f"{pattern:<{width}}  {description}")
    print("\nmiddleware stages (hookbus intercept STAGE JSON):")
    for stage, description in DESCRIPTIONS.items():
        print(f"{stage:<{width}}  {description}")
    return 0
