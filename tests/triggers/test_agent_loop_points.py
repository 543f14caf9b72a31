"""The loop's last points in the reference runner: turn.done (job_done's completion guardrail), loop.end,
turn.after and agent.error, and an in-place edit of assistant.message's content, against the scripted model
over a real nats-server."""

from __future__ import annotations

from typing import Any

from bus import Bus, Cancel, Continue, Patch, Stage
from bus._core.decisions import Decision
from bus._core.payloads import AgentError, LoopEnd, TurnAfter, TurnDone, from_dict, to_dict
from bus.testing import JournalRecorder, fake_llm, serving
from tests.support.turn_support import turn
from tests.support.waiting import wait_until
from tests.triggers.test_agent_points import Points, streamed
from triggers.agent.turn_runner import MAX_REWORK_ROUNDS, TurnRunnerSettings

JOB_DONE = TurnRunnerSettings(job_done=True)


def done(result: str) -> dict[str, Any]:
    return fake_llm.tool_calls(("job_done", {"result": result}))


async def test_a_rejected_completion_goes_back_to_the_model_as_job_dones_result(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    def guard(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("cite a source") if "source" not in payload["result"] else Continue()

    points = Points({"turn.done": guard}, [Stage.TURN_DONE, Stage.ASSISTANT_MESSAGE, Stage.LOOP_END, Stage.TURN_AFTER])
    llm.script = [done("42"), done("42, source: the guide")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, tokens = await turn(kernel, llm, settings=JOB_DONE, prompt="the answer?")
        await wait_until(lambda: streamed(tokens) == "42, source: the guide", what="the completion streamed")
    assert result["status"] == "completed" and result["answer"] == "42, source: the guide"
    assert {t["function"]["name"] for t in llm.requests[0]["tools"]} == {"clock", "echo", "job_done"}
    sent_back = llm.requests[1]["messages"][-1]
    assert sent_back["role"] == "tool" and sent_back["tool_call_id"] == "call_0"
    assert "job_done rejected" in sent_back["content"] and "cite a source" in sent_back["content"]
    agent = points.of("turn.done")[0]["agent"]
    assert points.of("turn.done") == [
        {"agent": agent, "turn": result["id"], "result": "42", "round": 0},
        {"agent": agent, "turn": result["id"], "result": "42, source: the guide", "round": 1},
    ]
    assert points.of("assistant.message") == []  # no text answer: the completion was job_done's
    assert points.of("loop.end") == [{"agent": agent, "turn": result["id"], "reason": "job_done", "rounds": 2}]
    assert points.of("turn.after")[0]["question"] == "the answer?"
    assert points.of("turn.after")[0]["answer"] == "42, source: the guide"


async def test_completion_reworks_stop_at_the_limit_and_the_completion_stands(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    journal = await JournalRecorder().attach(kernel)
    points = Points({"turn.done": lambda s, p: Patch({**p, "rework": f"more than {p['result']}"})})
    llm.script = [done("d1"), done("d2"), done("d3"), fake_llm.text("never asked")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, _ = await turn(kernel, llm, settings=JOB_DONE)
    assert result["answer"] == "d3"
    assert len(llm.requests) == 1 + MAX_REWORK_ROUNDS
    assert llm.requests[1]["messages"][-1]["content"].endswith("more than d1")
    assert [p["round"] for p in points.of("turn.done")] == [0, 1, 2]
    await wait_until(
        lambda: any(e.decision == "rework_limit" and e.point == "turn.done" for e in journal.entries),
        what="the rework-limit note at turn.done",
    )


async def test_a_patched_result_replaces_the_completion(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    points = Points({"turn.done": lambda s, p: Patch({**p, "result": p["result"].upper()})})
    llm.script = [done("quiet")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, _ = await turn(kernel, llm, settings=JOB_DONE)
    assert result["answer"] == "QUIET"


async def test_without_job_done_offered_a_job_done_call_is_an_unknown_tool(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    points = Points({}, [Stage.TURN_DONE])
    llm.script = [done("x"), fake_llm.text("plain")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, _ = await turn(kernel, llm)
    assert result["answer"] == "plain" and points.of("turn.done") == []
    assert {t["function"]["name"] for t in llm.requests[0]["tools"]} == {"clock", "echo"}
    assert llm.requests[1]["messages"][-1]["content"] == "no such tool: job_done"


async def test_a_failed_turn_asks_agent_error_before_the_error_event(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    points = Points(
        {"user.message": lambda s, p: Cancel("not today")},
        [Stage.USER_MESSAGE, Stage.AGENT_ERROR, Stage.LOOP_END, Stage.TURN_AFTER],
    )
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, rec, _ = await turn(kernel, llm)
    assert result["status"] == "failed"
    agent = points.of("user.message")[0]["agent"]
    assert points.of("agent.error") == [
        {"agent": agent, "turn": result["id"], "error": "user message rejected: not today", "component": "agent"}
    ]
    assert points.of("loop.end") == [] and points.of("turn.after") == []
    assert [e.event for e in rec.events if e.event in ("error", "agent_end")] == ["error", "agent_end"]


async def test_content_changed_in_place_replaces_the_answer(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    points = Points({"assistant.message": lambda s, p: Patch({**p, "content": p["content"].replace("42", "[n]")})})
    llm.script = [fake_llm.text("the pin is 42")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, tokens = await turn(kernel, llm)
        await wait_until(lambda: any(t["replace"] for t in tokens), what="the replacing token")
    assert result["answer"] == "the pin is [n]" and streamed(tokens) == "the pin is [n]"


async def test_an_unchanged_content_patch_re_emits_nothing(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    points = Points({"assistant.message": lambda s, p: Patch({**p, "note": "seen"})})
    llm.script = [fake_llm.text("fine as is")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, tokens = await turn(kernel, llm)
        await wait_until(lambda: streamed(tokens) == "fine as is", what="the answer streamed")
    assert result["answer"] == "fine as is" and not any(t["replace"] for t in tokens)


def test_typed_payloads_of_the_loop_points_keep_unknown_fields() -> None:
    wire = {"agent": "a", "turn": "t", "result": "r", "round": 1, "newer": True}
    typed = from_dict(TurnDone, wire)
    assert typed.result == "r" and typed.rework is None and typed.rest == {"newer": True}
    assert to_dict(typed) == wire
    typed.rework = "again"
    assert to_dict(typed)["rework"] == "again"
    for cls, fields in (
        (LoopEnd, {"reason": "job_done", "rounds": 3}),
        (TurnAfter, {"question": "q", "answer": "a", "rounds": 1}),
        (AgentError, {"error": "boom", "component": "llm"}),
    ):
        wire = {"agent": "a", "turn": "t", **fields, "x": 1}
        assert to_dict(from_dict(cls, wire)) == wire
