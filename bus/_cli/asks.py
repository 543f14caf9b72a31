"""``hookbus asks`` / ``allow ID`` / ``deny ID --reason TEXT`` / ``edit ID JSON``: an operator answers held calls.

A handler's Ask holds its call in the ``hookbus_asks`` bucket until an
operator answers it here (from any machine reaching NATS) or its deadline
applies the handler's fail mode. The first answer wins; each names who gave
it and the payload hash it approves (``--sha256``: the hash you saw, so an
answer never approves another payload); answers and refusals are journaled.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import orjson

from bus._cli.options import add_nats_url, command_bus, parse_json_object
from bus._core.errors import AskRefused
from bus._middleware.asks.records import AnswerMsg, AskMsg
from bus._middleware.asks.rules import AskRules, RuleMsg
from bus._middleware.asks.store import AskStore, Pending
from bus._operator import local_actor


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listing = subparsers.add_parser(
        "asks",
        help="list the calls held for an operator's answer",
        description="List the asks waiting for an answer, oldest first: id, agent, session, stage, handler, "
        "reason, time left and the exact payload. --follow keeps printing new asks and answers.",
    )
    listing.add_argument("--follow", action="store_true", help="then print each new ask and answer as it comes")
    listing.add_argument("--json", action="store_true", help="one JSON object per ask (with its id) per line")
    listing.add_argument("--user", default=None, help="only the asks of this NATS user (agent-eva)")
    listing.add_argument("--rules", action="store_true", help="list the standing rules (allow --remember) instead")
    listing.add_argument("--revoke", metavar="RULE", default=None, help="revoke the standing rule RULE for good")
    add_nats_url(listing)
    listing.set_defaults(func=run_list)

    allow = subparsers.add_parser("allow", help="let a held call pass", description="Let the held call ID pass.")
    _answer_options(allow)
    allow.add_argument(
        "--remember",
        choices=("session", "agent"),
        default=None,
        help="and allow the same handler's asks about the same tool for that session or agent from now on",
    )
    allow.set_defaults(func=run_answer, kind="allow")

    deny = subparsers.add_parser("deny", help="cancel a held call", description="Cancel the held call ID.")
    _answer_options(deny)
    deny.add_argument("--reason", required=True, help="why: the agent and the journal see it")
    deny.set_defaults(func=run_answer, kind="deny")

    edit = subparsers.add_parser(
        "edit",
        help="let a held call pass with another payload",
        description="Let the held call ID pass with PAYLOAD instead; the handlers after the asking one run on it.",
    )
    _answer_options(edit)
    edit.add_argument("payload", metavar="JSON", help="the payload the call goes on with (a JSON object)")
    edit.set_defaults(func=run_answer, kind="edit")


def _answer_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the ask's id, as 'hookbus asks' lists it")
    parser.add_argument(
        "--sha256", default=None, help="the payload hash you approve (default: the ask's own, as listed)"
    )
    parser.add_argument("--by", default=None, help="who answers, for the journal (default: user@host)")
    add_nats_url(parser)


async def run_list(args: argparse.Namespace) -> int:
    async with command_bus(args, "hookbus-asks") as bus:
        if args.revoke is not None:
            rule = await AskRules(bus.port).revoke(args.revoke, local_actor())
            await bus.flush()
            print(f"revoked {rule.id}: {rule.handler} on {rule.stage} ({rule.scope} {rule.scoped_to})")
            return 0
        if args.rules:
            for rule in await AskRules(bus.port).rules():
                print(orjson.dumps(rule.to_json()).decode() if args.json else _rule_line(rule), flush=True)
            return 0
        store = AskStore(bus.port)
        for item in await store.pending(args.user):
            print(_line(item, args.json), flush=True)
        if args.follow:
            async for kind, msg in store.watch():
                print(_followed(kind, msg, args.json), flush=True)
    return 0


async def run_answer(args: argparse.Namespace) -> int:
    payload = parse_json_object(args.payload, "the edited payload") if args.kind == "edit" else None
    async with command_bus(args, f"hookbus-{args.kind}") as bus:
        store = AskStore(bus.port)
        by = args.by or local_actor()
        remember = getattr(args, "remember", None)
        rule = None
        if remember is not None:  # the rule first: the kernel's next identical ask already finds it
            found = await store.find(args.id)
            if found is None:
                raise AskRefused(args.id, "no such ask (never asked, or expired)")
            rule = await AskRules(bus.port).remember(found, remember, by)
        ask, answer = await store.answer(
            args.id, args.kind, by, args.sha256, reason=getattr(args, "reason", None), payload=payload
        )
        await bus.flush()
    waited = answer.answered_at - ask.asked_at
    print(f"{args.kind} {ask.id}: {ask.handler} on {ask.stage} (agent {ask.agent}, waited {waited:.1f}s)")
    if rule is not None:
        print(f"remembered as rule {rule.id}: {_rule_line(rule)}")
    return 0


def _rule_line(rule: RuleMsg) -> str:
    what = f"{rule.field}={orjson.dumps(rule.value).decode()}"
    return f"{rule.id}  {rule.user}  {rule.scope} {rule.scoped_to}  {rule.stage} {what}  {rule.handler}  by {rule.by}"


def _line(item: Pending, as_json: bool) -> str:
    if as_json:
        return orjson.dumps(item.to_json()).decode()
    ask = item.ask
    left = max(0.0, ask.deadline - time.time())
    head = f"{ask.id}  {ask.user}/{ask.agent or '-'}  session {ask.session or '-'}  {ask.stage}  {ask.handler}"
    return f"{head}  {left:.0f}s left (then {ask.on_timeout})\n  {ask.reason}\n  {orjson.dumps(ask.payload).decode()}"


def _followed(kind: str, msg: AskMsg | AnswerMsg, as_json: bool) -> str:
    if isinstance(msg, AskMsg):
        return _line(Pending(msg), as_json)
    if as_json:
        body: dict[str, Any] = {"answered": msg.id, "kind": msg.kind, "by": msg.by, "reason": msg.reason}
        return orjson.dumps(body).decode()
    return f"answered {msg.id}: {msg.kind} by {msg.by}" + (f" ({msg.reason})" if msg.reason else "")
