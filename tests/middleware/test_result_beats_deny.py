"""On tool.call a later handler's ``result`` beats an earlier cancel (agent_os: result over deny), against a real
server: across modules, inside one module's run, after a fail-closed fault; elsewhere a cancel still ends the chain."""

from __future__ import annotations

from typing import Any

from bus import Bus, Cancel, Continue, Module, Patch, Stage
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.conftest import unique
from tests.support.waiting import wait_until


def _deny(mod: Module, stage: str, tool: str, asked: list[str], **options: Any) -> None:
    @mod.stage(stage, name="deny", match=[tool], **options)
    async def deny(stage: str, payload: dict[str, Any]) -> Cancel:
        asked.append("deny")
        return Cancel("not this tool")


def _result(mod: Module, stage: str, tool: str, asked: list[str], after: str, field: str = "result") -> None:
    @mod.stage(stage, name="cache", match=[tool], after=after)
    async def cache(stage: str, payload: dict[str, Any]) -> Patch:
        asked.append("cache")
        return Patch({**payload, field: "from the cache"})


async def test_a_later_modules_result_beats_an_earlier_cancel(kernel: Bus, nats_url: str) -> None:
    tool, asked = unique("t"), []
    first, second = Module(unique("deny")), Module(unique("cache"))
    _deny(first, Stage.TOOL_CALL, tool, asked)
    _result(second, Stage.TOOL_CALL, tool, asked, after=f"{first.name}.deny")
    journal = await JournalRecorder().attach(kernel)
    async with serving(first, nats_url), serving(second, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{first.name}.deny", f"{second.name}.cache"])
        decision = await kernel.intercept(Stage.TOOL_CALL, {"name": tool, "input": {}})
        other = await kernel.intercept(Stage.TOOL_CALL, {"name": unique("u"), "input": {}})
    assert decision == Patch({"name": tool, "input": {}, "result": "from the cache"})
    assert asked == ["deny", "cache"] and other == Continue()
    await wait_until(
        lambda: (
            {e.who for e in journal.entries if e.point == "tool.call"} >= {f"{first.name}.deny", f"{second.name}.cache"}
        ),
        what="both reactions journaled",
    )


async def test_in_one_modules_run_a_result_beats_the_cancel_before_it(kernel: Bus, nats_url: str) -> None:
    tool, asked = unique("t"), []
    mod = Module(unique("both"))
    _deny(mod, Stage.TOOL_CALL, tool, asked)
    _result(mod, Stage.TOOL_CALL, tool, asked, after=f"{mod.name}.deny")
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.deny", f"{mod.name}.cache"])
        decision = await kernel.intercept(Stage.TOOL_CALL, {"name": tool, "input": {"x": 1}})
    assert decision == Patch({"name": tool, "input": {"x": 1}, "result": "from the cache"})
    assert asked == ["deny", "cache"]


async def test_without_a_later_result_the_first_cancel_stands(kernel: Bus, nats_url: str) -> None:
    tool, asked = unique("t"), []
    first, second = Module(unique("deny")), Module(unique("edit"))
    _deny(first, Stage.TOOL_CALL, tool, asked)
    _result(second, Stage.TOOL_CALL, tool, asked, after=f"{first.name}.deny", field="note")  # a plain patch
    async with serving(first, nats_url), serving(second, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{first.name}.deny", f"{second.name}.cache"])
        decision = await kernel.intercept(Stage.TOOL_CALL, {"name": tool, "input": {}})
    assert isinstance(decision, Cancel) and decision.reason == "not this tool"
    assert decision.handler == f"{first.name}.deny" and asked == ["deny", "cache"]


async def test_a_result_beats_a_fail_closed_fault_and_the_tool_runs_in_neither_case(kernel: Bus, nats_url: str) -> None:
    tool, asked = unique("t"), []
    broken, second = Module(unique("broken")), Module(unique("cache"))

    @broken.stage(Stage.TOOL_CALL, name="guard", match=[tool], fail_closed=True)
    async def guard(stage: str, payload: dict[str, Any]) -> Cancel:
        asked.append("guard")
        raise RuntimeError("crashed")

    _result(second, Stage.TOOL_CALL, tool, asked, after=f"{broken.name}.guard")
    async with serving(broken, nats_url, detach_on_stop=True), serving(second, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{broken.name}.guard", f"{second.name}.cache"])
        decision = await kernel.intercept(Stage.TOOL_CALL, {"name": tool, "input": {}})
    assert isinstance(decision, Patch) and decision.payload["result"] == "from the cache"
    assert asked == ["guard", "cache"]


async def test_on_llm_request_a_cancel_still_ends_the_chain(kernel: Bus, nats_url: str) -> None:
    model, asked = unique("m"), []
    first, second = Module(unique("deny")), Module(unique("cache"))
    _deny(first, Stage.LLM_REQUEST, model, asked)
    _result(second, Stage.LLM_REQUEST, model, asked, after=f"{first.name}.deny")
    async with serving(first, nats_url), serving(second, nats_url):
        await wait_for_chain(kernel, "llm.request", [f"{first.name}.deny", f"{second.name}.cache"])
        decision = await kernel.intercept(Stage.LLM_REQUEST, {"model": model, "messages": []})
    assert isinstance(decision, Cancel) and asked == ["deny"]
