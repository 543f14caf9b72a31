"""Observability end to end: a workload, a real Prometheus scraping hookbus, every dashboard query answered."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import start_http_server

from bus import Bus, Cancel, Continue, Event, Module, Patch, Stage, register_collectors
from bus.core.decisions import Decision
from bus.core.depth import set_depth
from bus.testing import EventRecorder, serving, wait_for_chain
from deploy.grafana.build_dashboards import render
from triggers.demo import GUARD_HANDLERS, run_demo

from .conftest import require_binary
from .prometheus import Prometheus, free_port
from .test_cli import UpProcess
from .waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s"}


def dashboard_queries(name: str) -> list[tuple[str, str]]:
    board = json.loads((DEPLOY / "grafana" / "dashboards" / name).read_text())
    out = []
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            out.append((panel["title"], expr))
    return out


def test_prometheus_config_and_rules_pass_promtool() -> None:
    promtool = require_binary("promtool")
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"]):
        done = subprocess.run([promtool, *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_dashboards_are_built_from_their_source() -> None:
    for name, text in render().items():
        assert (DEPLOY / "grafana" / "dashboards" / name).read_text() == text, (
            f"run deploy/grafana/build_dashboards.py ({name})"
        )


def test_every_panel_reads_at_a_glance() -> None:
    for name in render():
        board = json.loads((DEPLOY / "grafana" / "dashboards" / name).read_text())
        for panel in board["panels"]:
            assert panel["title"]
            assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
            assert panel["options"]["legend"]["showLegend"], panel["title"]
            assert all(t["legendFormat"] for t in panel["targets"]), panel["title"]


async def workload(nats_url: str) -> None:
    """What a small fleet does: LLM calls (two models, one failing), tool calls, turns, errors, bad input,
    and intercepts against a guard module (cancels, patches, a fail-closed fault)."""
    guard = Module(f"guard{uuid.uuid4().hex[:6]}")

    @guard.stage(Stage.TOOL_CALL, fail_closed=True)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Decision:
        command = payload["input"]["command"]
        if command == "boom":
            raise RuntimeError("guard bug")
        if "rm" in command:
            return Cancel("only by hand")
        return Patch({**payload, "input": {"command": command + " --dry-run"}}) if command == "deploy" else Continue()

    async with Bus(nats_url, name="workload", trust_new=True) as bus, serving(guard, nats_url, detach_on_stop=True):
        await wait_for_chain(bus, "tool.call", [f"{guard.name}.no_rm"])
        for command in ("ls", "rm -rf /", "deploy", "boom") * 3:
            await bus.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": command}})
        rec = EventRecorder()

        def broken(event: Event) -> None:
            raise RuntimeError("handler bug")

        await bus.subscribe("eva.custom.>", broken)
        await bus.subscribe("prx.lifecycle.>", rec)
        await bus.flush()
        for i in range(20):
            model = "gpt-4o" if i % 2 else "llama-3"
            await bus.emit("prx.lifecycle.agent_start", {"agent": "a1", "session": f"s{i}"}, session_id=f"s{i}")
            await bus.emit(
                "prx.lifecycle.llm_response",
                {"provider": "openai", "model": model, "duration_ms": 100 + 50 * i, "success": i % 5 != 0},
            )
            await bus.emit(
                "prx.lifecycle.tool_call",
                {"tool": "shell" if i % 3 else "write_file", "success": i % 4 != 0, "output": "ok"},
            )
            await bus.emit("eva.turn.completed" if i % 6 else "eva.turn.failed", {"answer": "done"})
            await bus.emit("prx.lifecycle.error", {"component": "llm" if i % 2 else "tool", "message": "boom"})
            await bus.emit("eva.custom.note", {"text": "x" * (70_000 if i == 0 else 10)})
        await bus.publish_raw("prx.lifecycle.tool_call", b"not an envelope")
        set_depth(8)
        await bus.emit("eva.custom.loop", {})
        set_depth(0)
        await rec.wait_for(80)


HOOKS = {
    "eva.custom.note": [
        {"id": "ok", "command": "/bin/true"},
        {"id": "fails", "command": "/bin/false"},
        {"id": "slow", "command": "/bin/sleep", "args": ["5"], "timeout_ms": 50},
        {"id": "refused", "command": "true; rm -rf /"},
    ]
}
TRIGGERS = """
triggers:
  - {name: notes, on: eva.custom.note, prompt: "note {payload.text}", agent: eva, cooldown_s: 3600}
"""


@pytest.fixture
def observed(workspace: Path, nats_url: str) -> Iterator[Prometheus]:
    prometheus_bin = require_binary("prometheus")
    (workspace / "hooks.json").write_text(json.dumps({"hooks": HOOKS}))
    (workspace / "triggers.yaml").write_text(TRIGGERS)
    up = UpProcess(workspace, "--nats-url", nats_url)
    own_port = free_port()
    register_collectors()  # this process embeds Buses and serves its own /metrics
    own_server, _thread = start_http_server(own_port, addr="127.0.0.1")
    prom = Prometheus(
        prometheus_bin,
        {"hookbus": [up.metrics_url.split("//")[1].split("/")[0]], "workload": [f"127.0.0.1:{own_port}"]},
        rule_files=[DEPLOY / "prometheus" / "alerts.yml"],
    )
    try:
        prom.start()
        yield prom
    finally:
        prom.stop()
        own_server.shutdown()
        own_server.server_close()
        up.close()


async def test_every_dashboard_query_parses_and_returns_data(observed: Prometheus, nats_url: str) -> None:
    async with Bus(nats_url, name="demo", managed=GUARD_HANDLERS) as bus:
        report = await run_demo(bus, sessions=8, pace=0, seed=3)  # what `hookbus demo` plays
    assert report.cancelled and report.turns_answered
    await workload(nats_url)
    await asyncio.to_thread(observed.wait_for_series, 'hookbus_agent_llm_responses_total{job="hookbus"}')
    await asyncio.sleep(2.5)  # Prometheus's pace: two more scrapes after the workload, so rate() has two points
    empty = []
    for name in ("hookbus.json", "agents.json"):
        for title, expr in dashboard_queries(name):
            answer = await asyncio.to_thread(observed.query, expr)
            assert answer["status"] == "success", f"{name} / {title}: {expr}: {answer.get('error')}"
            if not answer["data"]["result"]:
                empty.append(f"{name} / {title}: {expr}")
    assert not empty, "queries without data:\n" + "\n".join(empty)
    for title, expr in dashboard_queries("nats.json"):  # the exporter is not running here: parsing only
        answer = await asyncio.to_thread(observed.query, expr)
        assert answer["status"] == "success", f"nats.json / {title}: {expr}: {answer.get('error')}"


async def test_agent_metrics_hold_the_workload(observed: Prometheus, nats_url: str) -> None:
    await workload(nats_url)
    await asyncio.to_thread(observed.wait_for_series, 'hookbus_agent_errors_total{job="hookbus"}')
    # Prometheus's own pace: at least one more scrape (every 1 s) after the first one that saw the workload,
    # so the samples read below hold all of it; the shell-hook counts below are waited for by value.
    await asyncio.sleep(1.5)

    def value(expr: str) -> float:
        result = observed.query(expr)["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    assert value('sum(hookbus_agent_llm_responses_total{job="hookbus"})') == 20
    assert value('sum(hookbus_agent_llm_responses_total{job="hookbus",outcome="error"})') == 4
    assert value('sum(hookbus_agent_llm_duration_seconds_count{job="hookbus",model="gpt-4o"})') == 10
    assert value('sum(hookbus_agent_tool_calls_total{job="hookbus",tool="write_file"})') == 7
    assert value('sum(hookbus_agent_tool_calls_total{job="hookbus",outcome="error"})') == 5
    assert value('sum(hookbus_agent_turns_total{job="hookbus",outcome="failed"})') == 4
    assert value('sum(hookbus_agent_errors_total{job="hookbus",component="llm"})') == 10
    assert value('sum(hookbus_events_dropped_total{job="hookbus",reason="malformed"})') >= 1
    assert value('sum(hookbus_events_dropped_total{job="workload",reason="depth"})') >= 1
    assert value('sum(hookbus_events_truncated_total{job="workload"})') >= 1
    # hook processes may still be finishing: wait for their counts to arrive
    for expr in (
        'sum(hookbus_shell_hook_runs_total{job="hookbus",hook="ok"})',
        'sum(hookbus_shell_hook_timeouts_total{job="hookbus"})',
        'sum(hookbus_shell_hook_refusals_total{job="hookbus"})',
    ):
        await wait_until(lambda expr=expr: value(expr) == 20, timeout=60)
    assert value('sum(hookbus_trigger_fired_total{job="hookbus"})') == 1
    assert value('sum(hookbus_trigger_suppressed_total{job="hookbus",reason="cooldown"})') == 19
