"""``hookbus events``: the event catalog."""

from __future__ import annotations

import argparse

import orjson

from bus.core.catalog import CATALOG, FAMILIES


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "events",
        help="list the catalogued events and their payload fields",
        description=(
            "List the events hookbus knows by name: subject, when it fires, payload fields with their JSON types "
            "(what 'hookbus emit --strict' checks). 'hookbus emit' refuses other subjects unless --any."
        ),
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    if args.json:
        listing = {
            subject: {"description": spec.description, "fields": dict(spec.fields)} for subject, spec in CATALOG.items()
        }
        print(orjson.dumps({"events": listing, "families": FAMILIES}, option=orjson.OPT_INDENT_2).decode())
        return 0
    width = max(len(subject) for subject in [*CATALOG, *FAMILIES])
    for subject, spec in CATALOG.items():
        fields = ", ".join(f"{name}: {kind}" for name, kind in spec.fields.items())
        print(f"{subject:<{width}}  {spec.description}" + (f"  [{fields}]" if fields else ""))
    for pattern, description in FAMILIES.items():
        print(f"{pattern:<{width}}  {description}")
    return 0
