"""``then: ask`` on a real nats-server: a rule holds the call for an operator, as a handler's ask does."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bus import Bus, Cancel, Continue
from bus._middleware.asks.store import AskStore
from bus._middleware.rules.compile import compile_file
from bus._middleware.rules.errors import RuleFileError
from bus._middleware.rules.files import parse
from tests.conftest import run_cli, unique
from tests.support.asks_support import pending_ask


def _file(tmp_path: Path, stem: str, tool: str, mode: str = "enforce") -> Path:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(
        f"rules:\n  - name: ask-rm\n    stage: tool\n    match: {tool}\n"
        "    if: 'payload.input.command.contains(\"rm\")'\n"
        "    then: {ask: 'rm in {{ payload.input.command }}'}\n"
        f"    mode: {mode}\n"
    )
    return path


async def test_an_ask_rule_holds_the_call_until_an_operator_answers(nats_url: str, tmp_path: Path) -> None:
    stem, tool = unique("askr"), unique("tool")
    async with Bus(nats_url, rules=[_file(tmp_path, stem, tool)]) as bus:
        store = AskStore(bus.port)
        for verb, expected in ((["allow"], Continue()), (["deny", "--reason", "not today"], None)):
            session = unique("s")
            call = {"name": tool, "input": {"command": "rm -rf /tmp/x"}}
            held = asyncio.create_task(bus.intercept("tool.call", call, {"session": session}))
            item = await pending_ask(store, session)
            assert item.ask.handler == f"{stem}.ask-rm"
            assert item.ask.reason == "rm in rm -rf /tmp/x"
            done = await asyncio.to_thread(run_cli, *verb, item.ask.id, "--nats-url", nats_url)
            assert done.returncode == 0, done.stderr
            decision = await held
            if expected is None:
                assert isinstance(decision, Cancel) and "not today" in decision.reason
            else:
                assert decision == expected
        other = {"name": tool, "input": {"command": "ls"}}
        assert await bus.intercept("tool.call", other, {"session": unique("s")}) == Continue()


async def test_a_shadow_ask_rule_never_holds(nats_url: str, tmp_path: Path) -> None:
    stem, tool = unique("askr"), unique("tool")
    async with Bus(nats_url, rules=[_file(tmp_path, stem, tool, "shadow")]) as bus:
        call = {"name": tool, "input": {"command": "rm x"}}
        assert await bus.intercept("tool.call", call, {"session": unique("s")}) == Continue()


def test_an_ask_needs_a_text_reason() -> None:
    text = "rules:\n  - name: a\n    stage: tool\n    if: 'true'\n    then: {ask: 3}\n"
    try:
        compile_file(parse(text, "a.yaml", "a"))
    except RuleFileError as exc:
        assert "ask's reason must be text" in exc.reason
    else:
        raise AssertionError("an ask with a number for its reason was accepted")
    bare = compile_file(parse("rules:\n  - name: a\n    stage: tool\n    if: 'true'\n    then: ask\n", "a.yaml", "a"))
    assert bare[0].kind == "ask"
