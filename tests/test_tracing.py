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

from bus import Bus, Cancel, Continue, Decision, Module
from bus.core import tracing
from bus.middleware.registry import announcement_of, request_subject
from bus.testing import serving, wait_for_chain

from .conftest import IN_CI, unique
from .waiting import wait_until


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
    assert tracing.valid_traceparent(good) == good
    for wrong in (None, 7, good.upper(), good[:-1], good.replace("00-", "ff-", 1), good + "-extra"):
        assert tracing.valid_traceparent(wrong) is None
    assert msgspec.json.decode(b'{"a":1}')  # msgspec stays importable beside the SDK


def test_a_process_without_opentelemetry_never_imports_it() -> None:
    code = (
        "import sys, bus.middleware.kernel.intercept, bus.middleware.handler.module, bus.core.tracing as t\n"
        "assert not t.active() and t.current_traceparent() is None\n"
        "with t.span('x') as s: assert s is None\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
