"""``hookbus hooks test EVENT [JSON]``: run the workspace's matching hooks once, locally.

Prints what each hook did: outcome, exit code, duration and output. Exits 1 if
any hook failed, timed out or was refused, so it fits in a CI check.
"""

from __future__ import annotations

import argparse
import os

from bus._cli.common import hint_event, read_json_object
from bus._cli.parser import add_command
from bus._cli.workspace import add_workspace, existing
from bus._transport.connection import URL_ENV


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from bus._sandbox.process import DEFAULT_KILL_GRACE

    parser = subparsers.add_parser("hooks", help="work with the shell hooks of a workspace", description=__doc__)
    commands = parser.add_subparsers(dest="hooks_command", metavar="COMMAND", required=True)
    test = add_command(commands, "test", "run the hooks an event triggers, once, locally", __doc__)
    test.add_argument("event", help="a PRX event name (tool_call) or a subject (eva.custom.deploy)")
    test.add_argument(
        "payload", nargs="?", default=None, help="the payload, a JSON object ('-': read stdin; default: {})"
    )
    test.add_argument("--session", default=None, help="session id of the event")
    add_workspace(test, "workspace with hooks.json")
    test.add_argument("--kill-grace", type=float, default=DEFAULT_KILL_GRACE, help="seconds from SIGTERM to SIGKILL")
    test.add_argument("--nats-url", default=None, help=f"NATS_URL given to the hooks (default: ${URL_ENV})")
    test.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from bus._core.subjects import subject_for
    from bus._sandbox.outcome import HookOutcome
    from subscribers.shell_hooks._hook_trial import describe, make_event, run_matching
    from subscribers.shell_hooks._shell import ShellRunner

    subject = subject_for(args.event)
    hint_event(subject, "hookbus hooks test")
    payload = read_json_object(args.payload if args.payload is not None else "{}", "the payload")
    event = make_event(subject, payload, args.session)
    found = existing(args)
    workspace = found.path
    nats_url = args.nats_url or os.environ.get(URL_ENV)
    runner = ShellRunner(workspace, nats_url=nats_url, kill_grace=args.kill_grace)
    ran = await run_matching(workspace, event, runner)
    if not ran:
        print(f"no enabled hook in {workspace / 'hooks.json'} (workspace {found.source}) matches {event.subject}")
        return 0
    for entry, result in ran:
        print(describe(entry, result))
    bad = sum(result.outcome is not HookOutcome.OK for _, result in ran)
    print(f"{len(ran)} hooks run for {event.subject}: {len(ran) - bad} ok, {bad} not ok")
    return 1 if bad else 0
