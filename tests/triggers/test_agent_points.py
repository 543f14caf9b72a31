"""The agent_os hook points in the reference runner, against the scripted model over a real nats-server.

Each test serves one module whose handlers record what they were asked and
answer as the scenario needs, runs a turn, and checks the order, the payloads,
what the model was sent and what clients were streamed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bus import Bus, Cancel, Continue, Module, Patch, Stage, TurnRequest
from bus._core.decisions import Decision
from bus._core.payloads import AssistantMessage, LlmRequest, ToolCall, from_dict, to_dict
from bus._journal.entries import ensure_journal_stream
from bus.testing import JournalRecorder, fake_llm, serving, wait_for_chain
from subscribers.journal._store import Query
from subscribers.journal.sink import JournalSink
from tests.conftest import run_cli
from tests.support.turn_support import turn
from tests.support.waiting import wait_until
from triggers.agent._llm import ChatClient
from triggers.agent.turn_runner import MAX_REWORK_ROUNDS, TurnRunner, TurnRunnerSettings

Answer = Callable[[str, dict[str, Any]], Decision]
NEW_STAGES = [
    Stage.AGENT_SPAWN, Stage.USER_MESSAGE, Stage.CONTEXT_EVICT, Stage.LLM_REQUEST, Stage.LLM_RETRY,
    Stage.LLM_TOKEN, Stage.TOOL_CALL, Stage.TOOL_EXEC, Stage.TOOL_RESULT, Stage.ASSISTANT_MESSAGE,
    Stage.TURN_END, Stage.AGENT_TERMINATE, Stage.TURN_DONE, Stage.LOOP_END, Stage.TURN_AFTER, Stage.AGENT_ERROR,
]  # fmt: skip


class Points:
    """A module answering the given stages: records (stage, payload) and answers with ``answers[stage]``."""

    def __init__(self, answers: dict[str, Answer], stages: list[Stage] | None = None) -> None:
        self.module = Module(f"p{uuid.uuid4().hex[:6]}")
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.stages = [str(stage) for stage in (stages or list(answers))]
        for stage in self.stages:
            self._declare(stage, answers.get(stage))

    def _declare(self, stage: str, answer: Answer | None) -> None:
        async def handler(name: str, payload: dict[str, Any]) -> Decision:
            self.asked.append((name, payload))
            return answer(name, payload) if answer else Continue()

        self.module.stage(stage, name=stage.replace(".", "_"))(handler)

    def of(self, stage: str) -> list[dict[str, Any]]:
        return [payload for name, payload in self.asked if name == stage]

    async def ready(self, kernel: Bus) -> None:
        for stage in self.stages:
            await wait_for_chain(kernel, stage, [f"{self.module.name}.{stage.replace('.', '_')}"])


def streamed(tokens: list[dict[str, Any]]) -> str:
    """What a client shows: the final-answer text, a replace token starting it over."""
    shown = ""
    for token in tokens:
        if token["final_answer"]:
            shown = token["text"] if token["replace"] else shown + token["text"]
    return shown


async def test_every_point_is_asked_in_turn_order_with_its_payload(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    points = Points({}, NEW_STAGES)
    llm.script = [fake_llm.tool_calls(("echo", {"text": "hey"})), fake_llm.text("all done now")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, rec, tokens = await turn(kernel, llm, prompt="say hey")
        await wait_until(lambda: streamed(tokens) == "all done now", what="the streamed answer")
    assert result["status"] == "completed" and result["answer"] == "all done now"
    order = [name for name, _ in points.asked if name != "llm.token"]
    assert order == [
        "agent.spawn", "user.message", "llm.request", "tool.call", "tool.exec", "tool.result",
        "llm.request", "assistant.message", "loop.end", "turn.end", "turn.after", "agent.terminate",
    ]  # fmt: skip
    agent = points.of("agent.spawn")[0]["agent"]
    assert points.of("user.message") == [{"agent": agent, "turn": result["id"], "content": "say hey"}]
    request = points.of("llm.request")[0]
    assert request["model"] == "model-a" and request["attempt"] == 1 and request["max_tokens"] is None
    assert request["messages"] == [{"role": "user", "content": "say hey"}]
    assert {tool["function"]["name"] for tool in request["tools"]} == {"clock", "echo"}
    assert points.of("tool.exec") == [
        {"name": "echo", "input": {"text": "hey"}, "command": ["builtin:echo", "text=hey"]}
    ]
    assert points.of("tool.result") == [{"name": "echo", "output": "hey", "is_error": False}]
    judged = points.of("assistant.message")[0]
    assert judged == {"agent": agent, "turn": result["id"], "content": "all done now", "round": 0}
    assert points.of("turn.end")[0]["answer"] == "all done now" and points.of("turn.end")[0]["rounds"] == 2
    assert points.of("loop.end") == [{"agent": agent, "turn": result["id"], "reason": "answer", "rounds": 2}]
    assert points.of("turn.after") == [
        {"agent": agent, "turn": result["id"], "question": "say hey", "answer": "all done now", "rounds": 2}
    ]
    assert points.of("agent.terminate") == [{"agent": agent, "turn": result["id"], "success": True, "error": None}]
    asked_tokens = points.of("llm.token")
    assert "".join(t["text"] for t in asked_tokens) == "all done now"
    assert all(t["final_answer"] and not t["replace"] and t["agent"] == agent for t in asked_tokens)
    assert [t["index"] for t in tokens] == sorted(t["index"] for t in tokens)
    assert llm.requests[0]["stream"] is True
    assert [e.event for e in rec.events][-3:] == ["turn_complete", "agent_end", "turn.completed"]


async def test_a_cached_result_skips_the_model_and_ends_the_chain(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    cached = Module(f"c{uuid.uuid4().hex[:6]}")
    asked: list[str] = []

    @cached.stage(Stage.LLM_REQUEST)
    async def cache(stage: str, payload: dict[str, Any]) -> Patch:
        asked.append("cache")
        return Patch({**payload, "result": "from the cache"})

    @cached.stage(Stage.LLM_REQUEST, after=f"{cached.name}.cache", fail_closed=True)  # not asked: not a fault
    async def deny(stage: str, payload: dict[str, Any]) -> Cancel:
        asked.append("deny")
        return Cancel("never asked: the result ended the chain")

    async with serving(cached, nats_url, detach_on_stop=True):  # its fail-closed handler guards no later test
        await wait_for_chain(kernel, "llm.request", [f"{cached.name}.cache", f"{cached.name}.deny"])
        result, rec, tokens = await turn(kernel, llm)
        await wait_until(lambda: streamed(tokens) == "from the cache", what="the cached answer streamed")
    assert result["answer"] == "from the cache" and asked == ["cache"]
    assert llm.requests == []  # the model server saw nothing
    assert "llm_request" not in [e.event for e in rec.events]


async def test_each_retry_asks_llm_retry_and_llm_request_again(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    def retry(stage: str, payload: dict[str, Any]) -> Decision:
        return Patch({**payload, "delay_s": 0, "model": "model-b"})

    points = Points({"llm.retry": retry, "llm.request": lambda s, p: Continue()})
    llm.script = [fake_llm.status(500), fake_llm.cut("half an answer", 1), fake_llm.text("whole answer")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, rec, tokens = await turn(kernel, llm)
        await wait_until(lambda: streamed(tokens) == "whole answer", what="the retried stream")
    assert result["answer"] == "whole answer"
    retries = points.of("llm.retry")
    assert [(r["attempt"], r["during"], r["max_attempts"]) for r in retries] == [(1, "connect", 3), (2, "stream", 3)]
    assert "HTTP 500" in retries[0]["error"] and retries[0]["model"] == "model-a" and retries[1]["model"] == "model-b"
    assert [r["attempt"] for r in points.of("llm.request")] == [1, 2, 3]
    assert [r["model"] for r in llm.requests] == ["model-a", "model-b", "model-b"]
    assert any(t["replace"] and t["text"] == "" for t in tokens)  # the cut stream was taken back
    errors = [e.payload["message"] for e in rec.events if e.event == "error"]
    assert "retry 1 of 2 in 0.0s" in errors[0] and "retry 2 of 2 in 0.0s" in errors[1]


async def test_a_cancelled_retry_fails_the_turn_with_the_reason(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    points = Points({"llm.retry": lambda s, p: Cancel("no retries at night")})
    llm.script = [fake_llm.status(503)]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, _ = await turn(kernel, llm)
    assert result["status"] == "failed" and "llm.retry cancelled: no retries at night" in result["error"]
    assert len(llm.requests) == 1


async def test_token_patches_change_the_stream_but_not_the_context(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    points = Points({"llm.token": lambda s, p: Patch({**p, "text": p["text"].upper()})})
    llm.script = [fake_llm.text("quiet little answer")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, rec, tokens = await turn(kernel, llm, settings=TurnRunnerSettings(stream_subject="eva.custom.mystream"))
        assert tokens == []  # the agent chose another subject
    assert result["answer"] == "quiet little answer"
    completed = [e.payload for e in rec.events if e.event == "turn.completed"]
    assert completed[0]["answer"] == "quiet little answer"
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        llm.script = [fake_llm.text("quiet little answer")]
        result, _, tokens = await turn(kernel, llm)
        await wait_until(lambda: streamed(tokens) == "QUIET LITTLE ANSWER", what="the patched stream")
    assert result["answer"] == "quiet little answer"


async def test_a_slow_token_handler_gets_the_rest_as_one_batch(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    async def slow(stage: str, payload: dict[str, Any]) -> Continue:
        asked.append(payload)
        llm.gate.set()  # the model goes on streaming while this handler is still busy
        try:
            await wait_until(lambda: llm.streamed == 1, timeout=4, what="the model's whole stream")
            finished.append(True)
        except AssertionError:  # the runner waited for this handler before reading on: the stream stalled
            finished.append(False)
        return Continue()

    asked: list[dict[str, Any]] = []
    finished: list[bool] = []
    module = Module(f"s{uuid.uuid4().hex[:6]}")
    module.stage(Stage.LLM_TOKEN)(slow)
    llm.script = [fake_llm.gated("one two three four five six")]
    async with serving(module, nats_url):
        await wait_for_chain(kernel, "llm.token", [f"{module.name}.slow"])
        result, _, tokens = await turn(kernel, llm)
        await wait_until(lambda: streamed(tokens) == "one two three four five six", what="the stream")
    assert result["answer"] == "one two three four five six"
    assert [(t["index"], t["text"]) for t in asked] == [(0, "one "), (1, "two three four five six")]
    assert [t["index"] for t in tokens] == [0, 1]
    assert finished == [True, True]


async def test_eviction_asks_for_the_summary_and_the_model_gets_it(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    points = Points({"context.evict": lambda s, p: Patch({**p, "summary": "the user wanted echoes"})})
    long = "x" * 400
    llm.script = [
        fake_llm.tool_calls(("echo", {"text": long})),
        fake_llm.tool_calls(("echo", {"text": long})),
        fake_llm.text("done"),
    ]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, _ = await turn(kernel, llm, settings=TurnRunnerSettings(context_tokens=200), prompt="echo twice")
    assert result["answer"] == "done"
    evictions = points.of("context.evict")
    assert evictions and evictions[0]["window_tokens"] == 200 and evictions[0]["tokens"] > 200
    assert evictions[0]["evicted"][0] == {"role": "user", "content": "echo twice"}
    assert evictions[0]["summary"] == ""
    last = llm.requests[-1]["messages"]
    assert last[0] == {"role": "system", "content": "Summary of the earlier conversation: the user wanted echoes"}
    assert {"role": "user", "content": "echo twice"} not in last
    assert last[-1]["role"] == "tool"  # the newest exchange stays whole


async def test_rework_stops_after_the_limit_with_a_journal_note(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    journal = await JournalRecorder().attach(kernel)
    points = Points({"assistant.message": lambda s, p: Patch({**p, "rework": f"better than {p['content']}"})})
    llm.script = [fake_llm.text("draft-1"), fake_llm.text("draft-2"), fake_llm.text("draft-3")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, tokens = await turn(kernel, llm)
        await wait_until(lambda: streamed(tokens) == "draft-3", what="the last draft streamed")
    assert result["answer"] == "draft-3"
    assert len(llm.requests) == 1 + MAX_REWORK_ROUNDS
    assert llm.requests[1]["messages"][-1] == {"role": "user", "content": "better than draft-1"}
    assert [m["role"] for m in llm.requests[1]["messages"]] == ["user", "user"]  # the answer was discarded
    assert [p["round"] for p in points.of("assistant.message")] == [0, 1, 2]
    assert [t["text"] for t in tokens if t["replace"]] == ["", ""]
    await wait_until(lambda: any(e.decision == "rework_limit" for e in journal.entries), what="the rework note")


async def test_suppress_and_replace_re_emit_with_replace(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    def guard(stage: str, payload: dict[str, Any]) -> Decision:
        if "secret" in payload["content"]:
            return Cancel("leaks a secret")
        return Patch({**payload, "answer": "a better answer"})

    points = Points({"assistant.message": guard})
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        llm.script = [fake_llm.text("the secret is 42")]
        suppressed, _, tokens = await turn(kernel, llm)
        await wait_until(lambda: any(t["replace"] for t in tokens), what="the suppressing token")
        llm.script = [fake_llm.text("a plain answer")]
        replaced, _, replaced_tokens = await turn(kernel, llm)
        await wait_until(lambda: any(t["replace"] for t in replaced_tokens), what="the replacing token")
    assert suppressed["status"] == "completed" and suppressed["answer"] == ""
    assert streamed(tokens) == "" and tokens[-1] == {**tokens[-1], "text": "", "replace": True, "final_answer": True}
    assert replaced["answer"] == "a better answer" and streamed(replaced_tokens) == "a better answer"


async def test_tool_points_short_circuit_gate_and_rewrite(kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM) -> None:
    def call(stage: str, payload: dict[str, Any]) -> Decision:
        return Patch({**payload, "result": "cached echo"}) if payload["name"] == "echo" else Continue()

    def result(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("no clocks here")

    points = Points({"tool.call": call, "tool.exec": lambda s, p: Continue(), "tool.result": result})
    llm.script = [fake_llm.tool_calls(("echo", {"text": "a"}), ("clock", {})), fake_llm.text("ok")]
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        done, rec, _ = await turn(kernel, llm)
    assert done["answer"] == "ok"
    assert [p["name"] for p in points.of("tool.exec")] == ["clock"]  # echo never ran
    outputs = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert outputs[0] == "cached echo"
    assert "no clocks here" in outputs[1] and "hidden" in outputs[1]
    calls = [e.payload for e in rec.events if e.event == "tool_call"]
    assert calls[0] == {"tool": "echo", "success": True, "output": "cached echo"}


async def test_user_message_spawn_and_turn_end_decide_the_turn(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    def user(stage: str, payload: dict[str, Any]) -> Decision:
        if "spam" in payload["content"]:
            return Cancel("looks like spam")
        return Patch({**payload, "content": payload["content"] + " (politely)"})

    def spawn(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("agent paused") if payload["trigger"] == "paused" else Continue()

    points = Points({"user.message": user, "turn.end": lambda s, p: Patch({**p, "answer": "[signed] " + p["answer"]})})
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        llm.script = [fake_llm.text("sure")]
        ok, _, _ = await turn(kernel, llm, prompt="help me")
        rejected, rec, _ = await turn(kernel, llm, prompt="buy spam")
    assert ok["answer"] == "[signed] sure"
    assert llm.requests[0]["messages"] == [{"role": "user", "content": "help me (politely)"}]
    assert rejected["status"] == "failed" and rejected["error"] == "TurnFailed: user message rejected: looks like spam"
    assert len(llm.requests) == 1
    assert [e.event for e in rec.events][-3:] == ["error", "agent_end", "turn.failed"]
    spawner = Points({"agent.spawn": spawn})
    async with serving(spawner.module, nats_url):
        await spawner.ready(kernel)
        agent = f"a{uuid.uuid4().hex[:6]}"
        runner = TurnRunner(kernel, agent, ChatClient(llm.url, "model-a"))
        try:
            await runner.handle(TurnRequest(agent=agent, prompt="x", trigger="paused"))
        except Exception as exc:  # the refusal, as the turn server reports it
            assert str(exc) == "agent.spawn cancelled: agent paused"
        else:
            raise AssertionError("a cancelled agent.spawn must refuse the turn")
        await runner.client.close()
    assert len(llm.requests) == 1


async def test_a_hostile_patch_fails_the_turn_naming_the_field(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    points = Points({"llm.request": lambda s, p: Patch({**p, "max_tokens": "lots"})})
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        result, _, _ = await turn(kernel, llm)
    assert result["status"] == "failed"
    assert (
        result["error"] == "TurnFailed: llm.request patch: 'max_tokens' must be a positive integer or null, not string"
    )
    assert llm.requests == []


async def test_undeclared_points_cost_nothing_and_answers_stream(kernel: Bus, llm: fake_llm.FakeLLM) -> None:
    llm.script = [fake_llm.text("plain streamed answer")]
    result, _, tokens = await turn(kernel, llm)
    await wait_until(lambda: streamed(tokens) == "plain streamed answer", what="the stream")
    assert result["answer"] == "plain streamed answer"
    llm.script = [fake_llm.unstreamed("sent whole")]  # a server that ignores stream: true
    result, _, tokens = await turn(kernel, llm)
    await wait_until(lambda: streamed(tokens) == "sent whole", what="the whole answer as one token")
    assert result["answer"] == "sent whole"


async def test_journal_session_reads_the_turns_decisions_in_order(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM, workspace: Path
) -> None:
    await ensure_journal_stream(kernel.port)
    sink = JournalSink(kernel, workspace, durable=f"points-{uuid.uuid4().hex[:6]}")
    stop = asyncio.Event()
    sinking = asyncio.create_task(sink.run(stop))
    points = Points(
        {
            "user.message": lambda s, p: Patch({**p, "content": "rewritten"}),
            "llm.request": lambda s, p: Patch({**p, "temperature": 0.5}),
            "tool.call": lambda s, p: Cancel("no tools today"),
            "assistant.message": lambda s, p: Patch({**p, "answer": "replaced"}),
            "turn.end": lambda s, p: Continue(),
        }
    )
    session = f"t{uuid.uuid4().hex[:8]}"
    llm.script = [fake_llm.tool_calls(("clock", {})), fake_llm.text("fine")]
    try:
        async with serving(points.module, nats_url):
            await points.ready(kernel)
            result, _, _ = await turn(kernel, llm, session=session)
        assert result["answer"] == "replaced"
        await wait_until(lambda: len(sink.store.query(Query(session=session))) >= 5, timeout=30, what="the entries")
    finally:
        stop.set()
        await sinking
    done = run_cli("journal", "--workspace", str(workspace), "--session", session, "--json")
    rows = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [(r["point"], r["decision"]) for r in rows] == [
        ("user.message", "patch"), ("llm.request", "patch"), ("tool.call", "cancel"),
        ("llm.request", "patch"), ("assistant.message", "patch"),
    ]  # fmt: skip
    assert {r["session"] for r in rows} == {session} and rows[2]["cause"] == "no tools today"


async def test_hookbus_intercept_and_events_know_every_new_stage(kernel: Bus, nats_url: str) -> None:
    new = [stage for stage in NEW_STAGES if stage not in (Stage.LLM_REQUEST, Stage.TOOL_CALL, Stage.TOOL_RESULT)]
    points = Points({str(stage): lambda s, p: Patch({**p, "seen_by": s}) for stage in new})
    payload = {"agent": "a1", "model": "m", "name": "echo"}
    async with serving(points.module, nats_url):
        await points.ready(kernel)
        for stage in new:  # the kernel the CLI runs, once per stage
            assert await kernel.intercept(stage, payload) == Patch({**payload, "seen_by": str(stage)})
        cli = [Stage.ASSISTANT_MESSAGE, Stage.TOOL_EXEC]  # two processes: each costs a start of the CLI
        env = {"NATS_URL": nats_url}
        runs = [
            asyncio.to_thread(run_cli, "intercept", s, orjson.dumps(payload).decode(), "--trust-new", env=env)
            for s in cli
        ]
        chain = asyncio.to_thread(run_cli, "chain", "--trust-new", env=env)
        *done, listed = await asyncio.gather(*runs, chain)
    assert f"{points.module.name}.assistant_message" in listed.stdout
    idle = next(line for line in listed.stdout.splitlines() if line.startswith("known stages with no handler"))
    assert "assistant.message" not in idle  # declared: listed with its chain above instead
    for stage, run in zip(cli, done, strict=True):
        assert run.returncode == 0, run.stderr
        assert orjson.loads(run.stdout) == {"decision": "patch", "payload": {**payload, "seen_by": str(stage)}}
    listing = orjson.loads(run_cli("events", "--json").stdout)["stages"]
    assert set(listing) == {str(stage) for stage in Stage}


GUARD_FILE = """
from bus import Cancel, Module, Patch, Stage

module = Module("guard")


@module.stage(Stage.ASSISTANT_MESSAGE)
async def rework(stage, payload):
    return Patch({**payload, "rework": "shorter please"})


@module.stage(Stage.ASSISTANT_MESSAGE, after="guard.rework", fail_closed=True)
async def suppress(stage, payload):
    return Cancel("never asked: the rework came first")
"""


def test_a_module_file_runs_a_new_stage_locally_without_a_bus(tmp_path: Path) -> None:
    (tmp_path / "guard.py").write_text(GUARD_FILE)
    payload = '{"agent": "a", "content": "a long answer"}'
    done = run_cli("test-module", str(tmp_path / "guard.py"), "assistant.message", payload, env={"NATS_URL": ""})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert orjson.loads(lines[0].removeprefix("decision: ")) == {
        "decision": "patch",
        "payload": {"agent": "a", "content": "a long answer", "rework": "shorter please"},
    }
    assert lines[1] == "journal: 1 entry" and '"who":"guard.rework"' in lines[2]


def test_typed_payloads_of_the_new_stages_keep_unknown_fields_and_send_only_set_decisions() -> None:
    wire = {"agent": "a", "turn": "t", "content": "draft", "round": 1, "from_a_newer_runner": {"x": 1}}
    typed = from_dict(AssistantMessage, wire)
    assert typed.content == "draft" and typed.rework is None and typed.rest == {"from_a_newer_runner": {"x": 1}}
    assert to_dict(typed) == wire  # no answer/rework keys while unset
    typed.rework = "shorter"
    assert to_dict(typed) == {**wire, "rework": "shorter"}
    call = to_dict(from_dict(ToolCall, {"name": "echo", "input": {}}))
    assert call == {"name": "echo", "input": {}}
    request = to_dict(from_dict(LlmRequest, {"model": "m"}))
    assert set(request) == {"model", "messages", "tools", "max_tokens", "temperature"}


async def test_a_stream_with_tool_call_deltas_of_the_wrong_types_is_a_named_model_error(
    llm: fake_llm.FakeLLM,
) -> None:
    """A hostile or broken model server's chunks fail the attempt as an LLMError naming the delta, never a TypeError."""
    from triggers.agent._errors import LLMError

    client = ChatClient(llm.url, "fake", attempts=1, timeout=5.0)
    try:
        for function in ({"name": 5, "arguments": "{}"}, "echo", {"name": "echo", "arguments": ["x"]}):
            step = fake_llm.tool_calls(("echo", {}))
            step["message"]["tool_calls"][0]["function"] = function
            llm.script.append(step)
            try:
                await client.stream({"model": "fake", "messages": []}, lambda text, asked: None)
            except LLMError as exc:
                assert "malformed tool-call delta" in str(exc), exc
            else:
                raise AssertionError(f"a tool-call function {function!r} was taken")
    finally:
        await client.close()
