"""OpenTelemetry: one trace from the agent's span through intercept to the handler, over a real server.

The SDK's in-memory exporter collects the spans. The trace context crosses
the wire in the request's ``ctx.traceparent`` (the handler runs in its
subscription's task, which never saw the agent's context); a malformed one is
ignored; a process that does not use OpenTelemetry never imports it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import orjson
import pytest
from nats.aio.client import Client

pytest.importorskip("opentelemetry.sdk")  # the otel extra; scripts/test installs it

if importlib.util.find_spec("langchain_core") is not None:  # the langchain extra: its tool's annotations
    from langchain_core.tools import InjectedToolCallId

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bus import Bus, Cancel, Continue, Decision, Module, Patch, TurnRequest
from bus._core.traceparent import valid_traceparent
from bus._middleware.registry import announcement_of, request_subject
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.conftest import IN_CI, StartWorker, unique
from tests.support.hooks_support import script, wait_for_file, write_hooks
from tests.support.waiting import wait_until


def test_the_extra_is_installed_under_ci() -> None:
    import importlib.util

    assert importlib.util.find_spec("opentelemetry.sdk") is not None or not IN_CI


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once) exporting to memory; shut down after the module."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    yield memory
    provider.shutdown()  # the rest of the run keeps tracing hookbus calls, but stores no spans


def _named(spans: tuple[ReadableSpan, ...], prefix: str) -> ReadableSpan:
    found = [s for s in spans if s.name.startswith(prefix)]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


async def test_one_trace_from_the_agents_span_to_the_handlers(
    exporter: InMemorySpanExporter, kernel: Bus, nats_url: str
) -> None:
    guard = Module(unique("traced"))

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("not today") if payload["name"] == "shell" else Continue()

    async with serving(guard, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{guard.name}.judge"])
        exporter.clear()
        with trace.get_tracer("agent").start_as_current_span("agent turn") as agent_span:
            decision = await kernel.intercept("tool.call", {"name": "shell", "input": {}})
        assert decision == Cancel("not today", f"{guard.name}.judge")
        await wait_until(lambda: len(exporter.get_finished_spans()) >= 3, what="three spans")
    spans = exporter.get_finished_spans()
    intercept = _named(spans, "hookbus intercept tool.call")
    handler = _named(spans, f"hookbus handler {guard.name}.judge")
    agent_id = agent_span.get_span_context()
    assert {s.context.trace_id for s in (intercept, handler)} == {agent_id.trace_id}
    assert intercept.parent is not None and intercept.parent.span_id == agent_id.span_id
    assert handler.parent is not None and handler.parent.span_id == intercept.context.span_id
    assert handler.parent.is_remote  # it came over the wire, not from a shared context
    assert intercept.attributes is not None and intercept.attributes["hookbus.decision"] == "cancel"
    assert handler.attributes is not None and handler.attributes["hookbus.outcome"] == "ok"
    assert handler.attributes["hookbus.stage"] == "tool.call"


async def test_a_malformed_traceparent_is_ignored_not_trusted(
    exporter: InMemorySpanExporter, nats_url: str, raw: Client
) -> None:
    guard = Module(unique("tracedraw"))

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        return Continue()

    bad = [
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # an all-zero trace id
        "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # an unknown version
        "x" * 5000,
    ]
    async with serving(guard, nats_url):
        for value in bad:
            exporter.clear()
            request = {"stage": "tool.call", "payload": {"name": "shell"}, "ctx": {"traceparent": value}}
            reply = await raw.request(request_subject(announcement_of(guard)), orjson.dumps(request), timeout=10)
            assert orjson.loads(reply.data)["decision"] == "continue"
            await wait_until(lambda: exporter.get_finished_spans(), what="the handler's span")
            (span,) = exporter.get_finished_spans()
            assert span.parent is None  # a trace of its own, nothing taken from the bad value


def test_traceparent_checks() -> None:
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert valid_traceparent(good) == good
    for wrong in (None, 7, good.upper(), good[:-1], good.replace("00-", "ff-", 1), good + "-extra"):
        assert valid_traceparent(wrong) is None
    assert msgspec.json.decode(b'{"a":1}')  # msgspec stays importable beside the SDK


def test_a_process_without_opentelemetry_never_imports_it() -> None:
    code = (
        "import sys, bus._middleware.kernel.intercept, bus._middleware.handler.module, bus._runtime.tracing as t\n"
        "assert not t.active() and t.current_traceparent() is None\n"
        "with t.span('x') as s: assert s is None\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _traceparent_of(span: Any) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


async def test_events_carry_the_trace_context_and_receivers_check_it(
    exporter: InMemorySpanExporter, bus: Bus, raw: Client
) -> None:
    subject = f"eva.custom.{unique('traced')}"
    recorder = EventRecorder()
    await bus.subscribe(subject, recorder)
    with trace.get_tracer("agent").start_as_current_span("agent turn") as agent_span:
        await bus.emit(subject, {"n": 0})
    await bus.emit(subject, {"n": 1})  # outside any span: no trace context
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    for n, value in enumerate([good, "00-nothex", 7, {"x": 1}], start=2):
        envelope = {"event": subject[4:], "timestamp": "2026-01-01T00:00:00.000Z", "session_id": None}
        envelope |= {"payload": {"n": n}, "id": f"raw-{n}", "depth": 0, "traceparent": value}
        await raw.publish(subject, orjson.dumps(envelope))
    await recorder.wait_for(6)
    seen = {e.payload["n"]: e.traceparent for e in recorder.events}
    assert seen == {0: _traceparent_of(agent_span), 1: None, 2: good, 3: None, 4: None, 5: None}
    traced = next(e for e in recorder.events if e.payload["n"] == 0)  # the raw connection's may come first
    assert orjson.loads(traced.raw)["traceparent"] == _traceparent_of(agent_span)


async def test_a_shell_hook_run_is_a_span_of_the_emitters_trace(
    exporter: InMemorySpanExporter, bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    out = workspace / "traceparent"
    script(workspace, "trace.sh", f'printf %s "$TRACEPARENT" > {out}\n')
    write_hooks(workspace, {"tool_call": [{"command": "./trace.sh"}]})
    await start_worker()
    exporter.clear()
    with trace.get_tracer("agent").start_as_current_span("agent turn") as agent_span:
        await bus.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True, "output": "ok"})
    written = await wait_for_file(out)
    await wait_until(lambda: any(s.name.startswith("hookbus shell-hook") for s in exporter.get_finished_spans()))
    run = _named(exporter.get_finished_spans(), "hookbus shell-hook")
    agent_ctx = agent_span.get_span_context()
    assert run.context.trace_id == agent_ctx.trace_id
    assert run.parent is not None and run.parent.span_id == agent_ctx.span_id
    assert run.attributes is not None and run.attributes["hookbus.outcome"] == "ok"
    run_ctx = run.context
    assert written == f"00-{run_ctx.trace_id:032x}-{run_ctx.span_id:016x}-{int(run_ctx.trace_flags):02x}"


async def test_a_triggered_turn_is_a_span_of_the_triggering_events_trace(
    exporter: InMemorySpanExporter, bus: Bus
) -> None:
    """The trigger engine hands the agent the event as received (``event.to_dict()``); the turn continues its trace."""
    agent, subject = unique("tracedagent"), f"eva.custom.{unique('trigger')}"
    answered: list[str] = []

    async def turn(request: TurnRequest) -> str:
        answered.append(request.id)
        return "done"

    await bus.serve_turns(agent, turn)
    recorder = EventRecorder()
    await bus.subscribe(subject, recorder)
    exporter.clear()
    with trace.get_tracer("agent").start_as_current_span("agent turn") as agent_span:
        await bus.emit(subject, {"n": 1})
    (event,) = await recorder.wait_for(1)
    request = TurnRequest(agent=agent, prompt="look", depth=1, trigger="t", event=dict(event.to_dict()))
    await bus.request_turn(request)
    await wait_until(lambda: any(s.name == f"invoke_agent {agent}" for s in exporter.get_finished_spans()))
    span = _named(exporter.get_finished_spans(), f"invoke_agent {agent}")
    assert answered == [request.id]
    assert span.context.trace_id == agent_span.get_span_context().trace_id
    assert span.parent is not None and span.parent.span_id == agent_span.get_span_context().span_id
    assert span.attributes is not None and span.attributes["hookbus.turn"] == request.id
    assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert span.attributes["gen_ai.agent.name"] == agent


async def test_each_handler_is_an_apply_guardrail_span_with_its_result_event(
    exporter: InMemorySpanExporter, kernel: Bus, nats_url: str
) -> None:
    first, second = Module(unique("gr")), Module(unique("gr"))

    @first.stage("tool.call", priority=20)
    async def redact(stage: str, payload: dict[str, Any]) -> Decision:
        return Patch({**payload, "input": {}})

    @second.stage("tool.call", priority=10)
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("not today")

    async with serving(first, nats_url), serving(second, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{first.name}.redact", f"{second.name}.judge"])
        identities = {link.decl.qualname: link.identity for link in kernel.middleware.view.chains["tool.call"].links}
        exporter.clear()
        decision = await kernel.intercept("tool.call", {"name": "shell", "input": {"x": 1}})
        assert isinstance(decision, Cancel)
        await wait_until(lambda: len(_guardrails(exporter)) == 2, what="two apply_guardrail spans")
    intercept = _named(exporter.get_finished_spans(), "hookbus intercept tool.call")
    spans = {s.name: s for s in _guardrails(exporter)}
    for handler, kind, value, reason in (
        (f"{first.name}.redact", "modify", "patch", None),
        (f"{second.name}.judge", "deny", "cancel", "not today"),
    ):
        span = spans[f"apply_guardrail {handler}"]
        assert span.parent is not None and span.parent.span_id == intercept.context.span_id
        assert span.context.trace_id == intercept.context.trace_id
        attributes = dict(span.attributes or {})
        assert attributes["gen_ai.operation.name"] == "apply_guardrail"
        assert attributes["gen_ai.guardian.name"] == attributes["gen_ai.security.policy.id"] == handler
        assert attributes["gen_ai.security.policy.version"] == identities[handler]
        assert attributes["gen_ai.security.target.type"] == "tool_call"
        assert attributes["gen_ai.security.decision.type"] == kind
        (event,) = span.events
        assert event.name == "gen_ai.guardrail.result"
        assert dict(event.attributes or {}) == {
            "gen_ai.security.policy.id": handler,
            "gen_ai.security.policy.version": identities[handler],
            "gen_ai.guardrail.result.type": kind,
            "gen_ai.guardrail.result.value": value,
            **({"gen_ai.guardrail.result.reason": reason} if reason else {}),
        }


async def test_a_fault_reads_as_its_fail_mode_in_the_guardrail_span(
    exporter: InMemorySpanExporter, kernel: Bus, nats_url: str
) -> None:
    mod, stage = Module(unique("grf")), f"custom.{unique('grf')}"

    @mod.stage(stage, fail_closed=True)
    async def broken(stage: str, payload: dict[str, Any]) -> Decision:
        raise RuntimeError("handler bug")

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.broken"])
        exporter.clear()
        assert isinstance(await kernel.intercept(stage, {}), Cancel)
        await wait_until(lambda: len(_guardrails(exporter)) == 1, what="the apply_guardrail span")
    (span,) = _guardrails(exporter)
    assert dict(span.attributes or {})["gen_ai.security.decision.type"] == "deny"
    assert dict(span.attributes or {})["gen_ai.security.target.type"] == stage
    event = dict(span.events[0].attributes or {})
    assert event["gen_ai.guardrail.result.value"] == "failed"
    assert "fail-closed" in str(event["gen_ai.guardrail.result.reason"])


async def test_a_guarded_langchain_tool_is_an_execute_tool_span(
    exporter: InMemorySpanExporter, kernel: Bus, nats_url: str
) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool

    from bus.adapters.langchain import guard_tool

    @tool
    async def shell(command: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Run a shell command."""
        return f"ran {command}"

    mod = Module(unique("grt"))

    @mod.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.judge"])
        guarded = guard_tool(shell, kernel, session_id=unique("s"))
        exporter.clear()
        call = {"name": "shell", "args": {"command": "ls"}, "id": "call-7", "type": "tool_call"}
        answer = await guarded.ainvoke(call)
        assert "ran ls" in str(answer.content)
        await wait_until(lambda: _any(exporter, "execute_tool shell"), what="the execute_tool span")
        await wait_until(lambda: len(_guardrails(exporter)) == 1, what="the guardrail span")
    spans = exporter.get_finished_spans()
    tool_span = _named(spans, "execute_tool shell")
    attributes = dict(tool_span.attributes or {})
    assert attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "shell",
        "gen_ai.tool.call.id": "call-7",
    }
    intercept = _named(spans, "hookbus intercept tool.call")  # tool.result has no handler here
    assert intercept.parent is not None and intercept.parent.span_id == tool_span.context.span_id


def _guardrails(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("apply_guardrail ")]


def _any(exporter: InMemorySpanExporter, name: str) -> bool:
    return any(s.name == name for s in exporter.get_finished_spans())


async def test_a_guarded_openai_agents_tool_is_an_execute_tool_span(
    exporter: InMemorySpanExporter, kernel: Bus, nats_url: str
) -> None:
    pytest.importorskip("agents")
    from types import SimpleNamespace

    from agents import FunctionTool

    from bus.adapters.openai_agents import guard_function_tool

    async def invoke(context: Any, arguments: str) -> str:
        return f"ran {orjson.loads(arguments)['command']}"

    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    guarded = guard_function_tool(FunctionTool("shell2", "Run a command.", schema, invoke), kernel)
    exporter.clear()
    answer = await guarded.on_invoke_tool(SimpleNamespace(tool_call_id="call-9"), '{"command": "ls"}')  # type: ignore[arg-type]
    assert answer == "ran ls"
    await wait_until(lambda: _any(exporter, "execute_tool shell2"), what="the execute_tool span")
    span = _named(exporter.get_finished_spans(), "execute_tool shell2")
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "shell2",
        "gen_ai.tool.call.id": "call-9",
    }


@pytest.mark.parametrize("refused", [False, True])
async def test_a_tools_call_through_hookbus_mcp_is_an_execute_tool_span(
    exporter: InMemorySpanExporter, kernel: Bus, nats_url: str, refused: bool
) -> None:
    """The proxy, in this process, between the SDK's ClientSession and a real MCP server on stdio: each
    tools/call is an ``execute_tool`` span named for ``mcp__server__tool`` with the JSON-RPC id, parent of
    both intercepts, ended once the result has been sent to the client; a call the chain refuses too."""
    pytest.importorskip("mcp")
    import sys

    import anyio
    from mcp import ClientSession
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCRequest

    from bus.adapters._mcp._proxy import McpProxy, ProxySettings, Streams, run_with
    from bus.adapters._mcp._stdio import server_on_stdio

    mod = Module(unique("mcpt"))

    @mod.stage("tool.call")
    async def judge_call(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("not this one") if refused else Continue()

    @mod.stage("tool.result")
    async def judge_result(stage: str, payload: dict[str, Any]) -> Decision:
        return Continue()

    ids: list[Any] = []
    client_out, relay_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    relay_out, proxy_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    proxy_out, client_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)

    async def relay() -> None:  # the client's messages on to the proxy, noting the tools/call ids
        async with relay_in, relay_out:
            async for item in relay_in:
                message = getattr(item, "message", None)
                if isinstance(message, JSONRPCRequest) and message.method == "tools/call":
                    ids.append(message.id)
                await relay_out.send(item)

    proxy = McpProxy(kernel, ProxySettings(server="fx"))
    upstream = lambda: server_on_stdio(sys.executable, ["-m", "bus.testing._mcp_server"])  # noqa: E731
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{mod.name}.judge_call"])
        await wait_for_chain(kernel, "tool.result", [f"{mod.name}.judge_result"])
        exporter.clear()
        async with proxy_out, client_in, anyio.create_task_group() as tg:
            tg.start_soon(relay)
            tg.start_soon(run_with, proxy, Streams(proxy_in, proxy_out), upstream)
            async with client_out, ClientSession(client_in, client_out) as session:
                await session.initialize()
                answer = await session.call_tool("echo", {"text": "hi"})
        texts = [getattr(block, "text", "") for block in answer.content]
        assert "not this one" in " ".join(texts) if refused else texts == ["hi"]
        await wait_until(lambda: _any(exporter, "execute_tool mcp__fx__echo"), what="the execute_tool span")
        stages = ("tool.call",) if refused else ("tool.call", "tool.result")
        await wait_until(lambda: _intercepts(exporter) == len(stages), what="the intercept spans")
    spans = exporter.get_finished_spans()
    tool_span = _named(spans, "execute_tool mcp__fx__echo")
    assert len(ids) == 1
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "mcp__fx__echo",
        "gen_ai.tool.call.id": str(ids[0]),
    }
    for stage in stages:
        intercept = _named(spans, f"hookbus intercept {stage}")
        assert intercept.parent is not None and intercept.parent.span_id == tool_span.context.span_id
        assert intercept.context.trace_id == tool_span.context.trace_id
        assert (intercept.end_time or 0) <= (tool_span.end_time or 0)  # the span outlives the result's intercept


def _intercepts(exporter: InMemorySpanExporter) -> int:
    return sum(1 for s in exporter.get_finished_spans() if s.name.startswith("hookbus intercept "))
