"""OpenTelemetry: one trace from the agent's span through intercept to the handler, over a real server.

The SDK's in-memory exporter collects the spans. The trace context crosses
the wire in the request's ``ctx.traceparent`` (the handler runs in its
subscription's task, which never saw the agent's context); a malformed one is
ignored; a process that does not use OpenTelemetry never imports it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from nats.aio.client import Client

pytest.importorskip("opentelemetry.sdk")  # the otel extra; scripts/test installs it

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bus import Bus, Cancel, Continue, Decision, Module, TurnRequest
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
    await wait_until(lambda: any(s.name == f"hookbus turn {agent}" for s in exporter.get_finished_spans()))
    span = _named(exporter.get_finished_spans(), f"hookbus turn {agent}")
    assert answered == [request.id]
    assert span.context.trace_id == agent_span.get_span_context().trace_id
    assert span.parent is not None and span.parent.span_id == agent_span.get_span_context().span_id
    assert span.attributes is not None and span.attributes["hookbus.turn"] == request.id
