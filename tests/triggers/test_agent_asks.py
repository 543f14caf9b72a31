"""The reference agent holds its turn on an ask: the tool call waits for `hookbus allow`/`deny`, then goes on."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from bus import Ask, Bus, Continue, Module, Stage
from bus._middleware.asks.store import AskStore, Pending
from bus.testing import fake_llm, serving, wait_for_chain
from tests.conftest import run_cli
from tests.support.turn_support import turn
from tests.support.waiting import wait_until


def _asker() -> tuple[Module, list[dict[str, Any]]]:
    mod = Module(f"ask{uuid.uuid4().hex[:6]}")
    results: list[dict[str, Any]] = []

    @mod.stage(Stage.TOOL_CALL)
    async def confirm(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask(f"run {payload['name']}?", timeout=60)

    @mod.stage(Stage.TOOL_RESULT)
    async def seen(stage: str, payload: dict[str, Any]) -> Continue:
        results.append(payload)
        return Continue()

    return mod, results


async def _pending(nats_url: str, session: str) -> Pending:
    found: list[Pending] = []
    async with Bus(nats_url, name="operator") as op:
        store = AskStore(op.port)

        async def one() -> bool:
            found[:] = [item for item in await store.pending() if item.ask.session == session]
            return bool(found)

        await wait_until(one, what=f"the ask of {session}")
    return found[0]


@pytest.mark.parametrize("answer", ["allow", "deny"])
async def test_a_turn_holds_on_an_asked_tool_call_until_the_operator_answers(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM, answer: str
) -> None:
    mod, results = _asker()
    session = f"s-{uuid.uuid4().hex[:6]}"
    llm.script = [fake_llm.tool_calls(("echo", {"text": "hey"})), fake_llm.text("all done")]
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.confirm"])
        await wait_for_chain(kernel, "tool.result", [f"{mod.name}.seen"])
        running = asyncio.create_task(turn(kernel, llm, prompt="say hey", session=session))
        item = await _pending(nats_url, session)
        assert item.ask.payload["name"] == "echo" and item.ask.payload["input"] == {"text": "hey"}
        assert len(llm.requests) == 1 and not running.done(), "the turn waits at the tool call"
        extra = ["--reason", "not now"] if answer == "deny" else []
        done = await asyncio.to_thread(run_cli, answer, item.ask.id, *extra, "--nats-url", nats_url)
        assert done.returncode == 0, done.stderr
        result, _, _ = await running
    assert result["status"] == "completed" and result["answer"] == "all done"
    told = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    if answer == "allow":
        assert told == ["hey"] and [r["output"] for r in results] == ["hey"]
    else:
        assert len(told) == 1 and "not now" in told[0] and results == [], "the tool never ran"
