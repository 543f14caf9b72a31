"""Metrics about the agents, derived from their lifecycle events.

hookbus's own counters say what the bus did; these say what the agents did:
LLM latency and error ratio by provider and model (from ``llm_response``),
tool calls and failures by tool (``tool_call``), turns by outcome
(``eva.turn.completed`` / ``eva.turn.failed``), errors by component
(``error``). Replicas run in one queue group so that nothing is counted twice;
label values are capped so that a flood of model or tool names cannot blow up
the time-series count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

from prometheus_client import Counter, Histogram
from prometheus_client.registry import REGISTRY, CollectorRegistry

from bus._client import Bus
from bus._core.envelope import Event
from bus._core.subjects import AGENT_METRICS_QUEUE
from bus._metrics import register_once
from bus._runtime.stats import LabelCap
from bus._service import ServiceContext

QUEUE: Final = AGENT_METRICS_QUEUE

LLM_SECONDS = Histogram(
    "hookbus_agent_llm_duration_seconds",
    "LLM call latency reported by llm_response events, by provider and model.",
    ["provider", "model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
    registry=None,
)
LLM_RESPONSES = Counter(
    "hookbus_agent_llm_responses",
    "LLM responses by provider, model and outcome (success|error).",
    ["provider", "model", "outcome"],
    registry=None,
)
TOOL_CALLS = Counter(
    "hookbus_agent_tool_calls",
    "Finished tool calls by tool and outcome (success|error).",
    ["tool", "outcome"],
    registry=None,
)
TURNS = Counter("hookbus_agent_turns", "Agent turns by outcome (completed|failed).", ["outcome"], registry=None)
ERRORS = Counter("hookbus_agent_errors", "error events by component.", ["component"], registry=None)
SESSIONS = Counter("hookbus_agent_starts", "agent_start events: turns the agent loops began.", registry=None)


def register_metrics(registry: CollectorRegistry = REGISTRY) -> None:
    """Expose these metrics on ``registry``; the service calls it when it starts (importing registers nothing)."""
    register_once(
        (
            LLM_SECONDS,
            LLM_RESPONSES,
            TOOL_CALLS,
            TURNS,
            ERRORS,
            SESSIONS,
        ),
        registry,
    )


class AgentMetrics:
    """The event handlers that feed the agent metrics."""

    def __init__(self, max_models: int = 50, max_tools: int = 100, max_components: int = 50) -> None:
        self.providers = LabelCap(20)
        self.models = LabelCap(max_models)
        self.tools = LabelCap(max_tools)
        self.components = LabelCap(max_components)

    def on_event(self, event: Event) -> None:
        handler = self._handlers.get(event.event)
        if handler is not None:
            handler(self, event.payload)

    def _llm_response(self, payload: dict[str, Any]) -> None:
        provider, model = self.providers(payload.get("provider")), self.models(payload.get("model"))
        outcome = "success" if payload.get("success") is True else "error"
        LLM_RESPONSES.labels(provider, model, outcome).inc()
        duration = payload.get("duration_ms")
        if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
            LLM_SECONDS.labels(provider, model).observe(duration / 1000)

    def _tool_call(self, payload: dict[str, Any]) -> None:
        outcome = "success" if payload.get("success") is True else "error"
        TOOL_CALLS.labels(self.tools(payload.get("tool")), outcome).inc()

    def _error(self, payload: dict[str, Any]) -> None:
        ERRORS.labels(self.components(payload.get("component"))).inc()

    def _turn_completed(self, payload: dict[str, Any]) -> None:
        TURNS.labels("completed").inc()

    def _turn_failed(self, payload: dict[str, Any]) -> None:
        TURNS.labels("failed").inc()

    def _agent_start(self, payload: dict[str, Any]) -> None:
        SESSIONS.inc()

    _handlers: Final = {
        "llm_response": _llm_response,
        "tool_call": _tool_call,
        "error": _error,
        "turn.completed": _turn_completed,
        "turn.failed": _turn_failed,
        "agent_start": _agent_start,
    }


async def subscribe(bus: Bus, metrics: AgentMetrics | None = None) -> AgentMetrics:
    """Feed agent metrics from ``bus`` in the shared queue group (registering them on the default registry)."""
    register_metrics()
    metrics = metrics or AgentMetrics()
    await bus.subscribe("prx.lifecycle.>", metrics.on_event, queue=QUEUE)
    await bus.subscribe("eva.turn.*", metrics.on_event, queue=QUEUE)
    return metrics


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """``hookbus up`` derives agent metrics from the lifecycle events it sees.

    On a connection of its own: under a flood of lifecycle events it may fall
    behind until the server cuts it, and that must cost the shell hooks,
    triggers and journal on the main connection nothing.
    """
    async with ctx.connect("hookbus-up-agent-metrics") as bus:
        await subscribe(bus)
        yield
