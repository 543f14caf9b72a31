"""``hookbus records``: list, show, put, test, enable/disable and remove stored handler records (docs/records.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import msgspec

from bus._cli.common import add_nats_url, read_json_object
from bus._cli.options import command_bus
from bus._core.errors import ConfigError, RecordError
from bus._records.subjects import RECORDS_MODULE


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "records",
        help="stored handler records: list, show, put, test",
        description="Handler records kept on the bus and served by 'hookbus runner' once approved.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = _action(actions, "list", "every record with its state (approved, waiting, disabled)")
    show = _action(actions, "show", "one record: its fields, state, identity and source")
    show.add_argument("name", help="the record's name")
    put = _action(actions, "put", "store FILE.py as a record (it waits for approval unless --approve)")
    put.add_argument("file", type=Path, help="Python source defining async def handle(stage, payload, ctx)")
    put.add_argument("--stage", required=True, help="the stage it handles (tool.call ...)")
    put.add_argument("--name", help="record name (default: the file's stem)")
    put.add_argument("--match", action="append", default=[], help="tool names it takes (repeatable)")
    put.add_argument("--before", action="append", default=[], help="handler it runs before (repeatable)")
    put.add_argument("--after", action="append", default=[], help="handler it runs after (repeatable)")
    put.add_argument("--fail-closed", action="store_true", help="its faults cancel the call")
    put.add_argument("--timeout", type=float, default=2.0, help="seconds per call (default: 2)")
    put.add_argument("--disabled", action="store_true", help="store it disabled")
    put.add_argument("--approve", action="store_true", help="approve this version too (an operator's write)")
    test = _action(actions, "test", "run a record (NAME from the bus, or FILE.py) on a payload, locally")
    test.add_argument("name", help="a stored record's name, or a .py file (then give --stage)")
    test.add_argument("payload", nargs="?", help="JSON object (default: stdin)")
    test.add_argument("--stage", help="the stage, for a file")
    test.add_argument(
        "--allow-import", action="append", default=None, metavar="MODULE", help="a module it may import (repeatable)"
    )
    for action in ("enable", "disable"):
        switch = _action(actions, action, f"{action} a record and approve that version (an operator's write)")
        switch.add_argument("name", help="the record's name")
    remove = _action(actions, "rm", "remove a record: draft, approved copy and approval")
    remove.add_argument("name", help="the record's name")
    for sub in (listing, show, put, test, remove, *(actions.choices[a] for a in ("enable", "disable"))):
        sub.add_argument("--module", default=RECORDS_MODULE, help=f"the runner module (default: {RECORDS_MODULE})")
        add_nats_url(sub)
    parser.set_defaults(func=run)


def _action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, text: str
) -> argparse.ArgumentParser:
    return actions.add_parser(name, help=text, description=text[:1].upper() + text[1:] + ".")


async def run(args: argparse.Namespace) -> int:
    if args.action == "test" and args.name.endswith(".py"):
        return await _test_file(args)
    from bus._records.store import RecordStore

    async with command_bus(args, "hookbus-records") as bus:
        store = RecordStore(bus.port, args.module)
        if args.action == "list":
            return await _list(store)
        if args.action == "show":
            return await _show(store, args.name)
        if args.action == "put":
            return await _put(store, args)
        if args.action == "test":
            record = await store.get(args.name)
            if record is None:
                raise RecordError(args.name, f"no such record in module {args.module}")
            return await _run_locally(record, args)
        if args.action in ("enable", "disable"):
            return await _switch(store, args.name, args.action == "enable")
        await store.remove(args.name)
        print(f"removed {args.module}.{args.name}")
    return 0


async def _state(store: Any, name: str, record: Any, copy: Any) -> str:
    """serving / waiting for approval / disabled (why) / approved, disabled."""
    approved = await store.trusted(name)
    identity = record.identity(store.module) if record is not None else None
    if copy is not None and not isinstance(copy, RecordError) and copy.disabled:
        return f"disabled by the runner: {copy.disabled}"
    if identity is not None and identity == approved:
        return "approved" + ("" if record.enabled else ", disabled")
    if copy is not None and not isinstance(copy, RecordError) and copy.identity == approved:
        return "waiting for approval (the approved version serves)"
    return "waiting for approval"


async def _list(store: Any) -> int:
    drafts = await store.all()
    copies = await store.approved()
    if not drafts and not copies:
        print(f"no records in module {store.module}")
    for name in sorted(drafts.keys() | copies.keys()):
        record = drafts.get(name)
        if isinstance(record, RecordError):
            print(f"{store.module}.{name}  malformed: {record.reason}")
            continue
        shown = record if record is not None else copies[name].record
        state = await _state(store, name, record, copies.get(name))
        print(f"{store.module}.{name}  {shown.stage}  {state}  identity {shown.identity(store.module)[:12]}")
    return 0


async def _show(store: Any, name: str) -> int:
    record = await store.get(name)
    copy = await store.get_approved(name)
    if record is None and copy is None:
        raise RecordError(name, f"no such record in module {store.module}")
    shown = record if record is not None else copy.record
    fields = {k: v for k, v in json.loads(shown.to_bytes()).items() if k != "source"}
    fields["state"] = await _state(store, name, record, copy)
    fields["identity"] = shown.identity(store.module)
    print(json.dumps(fields, indent=2))
    print(shown.source, end="")
    return 0


async def _put(store: Any, args: argparse.Namespace) -> int:
    from bus._operator import local_actor
    from bus._records.record import from_fields

    source = _read(args.file)
    fields = {
        "name": args.name or args.file.stem,
        "stage": args.stage,
        "source": source,
        "match": args.match,
        "before": args.before,
        "after": args.after,
        "fail_closed": args.fail_closed,
        "timeout": args.timeout,
        "enabled": not args.disabled,
    }
    record = from_fields(fields, author=local_actor())
    identity = await store.put(record)
    if args.approve:
        await store.approve(record, local_actor())
    state = "approved" if args.approve else "waiting for approval (hookbus approve " + f"{store.module}.{record.name})"
    print(f"stored {store.module}.{record.name} (identity {identity[:12]}): {state}")
    return 0


async def _switch(store: Any, name: str, enabled: bool) -> int:
    from bus._operator import local_actor
    from bus._records.store import Approved

    record = await store.get(name)
    if record is None:
        raise RecordError(name, f"no such record in module {store.module}")
    changed = record.with_changes(enabled=enabled)
    await store.put(changed)
    await store.approve(changed, local_actor())
    copy = await store.get_approved(name)
    if enabled and copy is not None and copy.disabled:  # the operator puts it back in service
        identity = changed.identity(store.module)
        await store.keep_approved(Approved(changed, identity, None, copy.at))
    print(
        f"{'enabled' if enabled else 'disabled'} {store.module}.{name} (identity {changed.identity(store.module)[:12]})"
    )
    return 0


async def _test_file(args: argparse.Namespace) -> int:
    from bus._records.record import from_fields

    if not args.stage:
        raise ConfigError("records test FILE.py needs --stage")
    source = _read(Path(args.name))
    record = from_fields({"name": Path(args.name).stem, "stage": args.stage, "source": source})
    return await _run_locally(record, args)


async def _run_locally(record: Any, args: argparse.Namespace) -> int:
    """Compile and run the record here, as the runner would, and print the decision as JSON."""
    from bus._core.decisions import reply_of
    from bus._records.execute import run_record
    from bus._records.sandbox import DEFAULT_IMPORTS, RecordCtx, compile_record

    payload = read_json_object(args.payload, "payload")
    handler = compile_record(record.name, record.source, args.allow_import or DEFAULT_IMPORTS)
    decl = record.declaration(args.module)
    ctx = RecordCtx(decl.stage, decl.qualname, None, None, 0, 0.0, "test")
    ran = await run_record(handler, decl, payload, ctx)
    out: dict[str, Any] = msgspec.to_builtins(reply_of(ran.decision))
    out["outcome"] = ran.outcome.value
    if ran.cause:
        out["cause"] = ran.cause
    print(json.dumps(out))
    return 0 if ran.outcome.value == "ok" else 1


def _read(path: Path) -> str:
    """A record's source file (a small local file: read before anything waits on the bus)."""
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
