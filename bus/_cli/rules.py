"""``hookbus rules``: push rule files to the fleet, try one locally, report what a shadow rule would have done.

hookbus rules push rules/guards.yaml          # as the operator: every kernel takes it (after approval)
hookbus rules test rules/guards.yaml tool '{"name": "shell", "input": {"command": "rm -rf /"}}' --agent eva
hookbus rules shadow-report guards.no-rm --since 24h
"""

from __future__ import annotations

import argparse

import orjson

from bus._cli.common import add_nats_url
from bus._cli.options import command_bus
from bus._cli.parser import add_command
from bus._cli.workspace import add_workspace
from bus._core.errors import ConfigError
from bus._middleware.rules.files import SHORTHANDS, read_path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "rules", "declarative rule guards: push, test, shadow-report", __doc__)
    commands = parser.add_subparsers(dest="rules_command", metavar="COMMAND", required=True)
    push_help = "check rule files and write them to the hookbus_rules bucket"
    push = commands.add_parser("push", help=push_help, description=push_help + " (all checked before any is written)")
    push.add_argument("files", nargs="+", metavar="FILE", help="rule files (YAML); each is named by its stem")
    add_nats_url(push)
    push.set_defaults(func=run_push)
    test_help = "run a rule file on one payload locally (no bus)"
    test = commands.add_parser("test", help=test_help, description=test_help + ", printing the decision")
    test.add_argument("file", metavar="FILE", help="the rule file (YAML)")
    test.add_argument("stage", help=f"the stage, or a shorthand ({', '.join(SHORTHANDS)})")
    test.add_argument("payload", metavar="JSON", help="the payload, a JSON object")
    for name in ("agent", "user", "session", "template"):
        test.add_argument(f"--{name}", help=f"the call's {name}")
    test.set_defaults(func=run_test)
    report_help = "what a shadow rule would have changed, from the journal (as 'hookbus shadow report')"
    report = commands.add_parser("shadow-report", help=report_help, description=report_help + " (counts and a sample)")
    report.add_argument("name", help="the rule's qualified name (guards.no-rm)")
    report.add_argument("--since", default="24h", metavar="DURATION", help="entries of the last DURATION (24h)")
    add_workspace(report, "workspace whose journal to read")
    report.set_defaults(func=run_shadow_report)


async def run_push(args: argparse.Namespace) -> int:
    from bus._middleware.rules.publish import check, push

    checked = check(args.files)  # refused here, with file and line, before anything is written
    async with command_bus(args, "hookbus-rules") as bus:
        await push(bus.port, checked)
    for one in checked:
        names = ", ".join(f"{rule.qualname} ({rule.identity[:12]})" for rule in one.rules) or "no rules"
        print(f"pushed {one.stem}: {names}")
    print("new or changed rules wait for 'hookbus approve NAME'")
    return 0


async def run_test(args: argparse.Namespace) -> int:
    from bus._middleware.kernel.ruling import offline
    from bus._middleware.rules.compile import compile_file

    try:
        payload = orjson.loads(args.payload)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"the payload is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ConfigError("the payload must be a JSON object")
    stage = SHORTHANDS.get(args.stage, args.stage)
    ctx = {name: getattr(args, name) for name in ("agent", "user", "session", "template")}
    final, _, payload, steps = offline(compile_file(read_path(args.file)), stage, payload, ctx)
    for step in steps:
        print(step)
    print(f"decision: {final}")
    if final == "patch":
        print(orjson.dumps(payload).decode())
    return 0


async def run_shadow_report(args: argparse.Namespace) -> int:
    from bus._cli.shadow import report

    return report(args, args.name)
