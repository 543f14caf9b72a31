"""Observability end to end: a workload, a real Prometheus scraping hookbus, every dashboard query answered."""

from __future__ import annotations

import asyncio
import functools
import json
import operator
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus import Bus, Cancel, Continue, Event, Module, Patch, Stage
from bus._core.decisions import Decision
from bus._core.depth import set_depth
from bus._counters import INTERVAL_ENV
from bus.testing import EventRecorder, serving, wait_for_chain
from deploy.grafana.build_dashboards import render
from tests.cli.test_cli import UpProcess
from tests.conftest import require_binary, run_cli
from tests.support.prometheus import Prometheus
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
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


async def workload(nats_url: str) -> str:
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
        await bus.port.publish_raw("prx.lifecycle.tool_call", b"not an envelope")
        set_depth(8)
        await bus.emit("eva.custom.loop", {})
        set_depth(0)
        await rec.wait_for(80)
    return guard.name


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


#: A hook that re-emits the event it reacts to with `hookbus emit`, run from the checkout (``python -m bus._cli``,
#: as ``hookbus_cmd`` does: the hook's environment is rebuilt from nothing, and an editable install may not
#: be importable from the workspace).
LOOP_SCRIPT = f"""#!/bin/sh
cd {ROOT} && exec {sys.executable} -m bus._cli emit eva.custom.loop '{{}}'
"""
#: The recursion alert waits 10 minutes on the shipped rules; here it may fire at once (same expression).
FAST_ALERTS = {"HookbusRecursionLimitHit": "0s"}


def fast_rules(folder: Path) -> Path:
    """The shipped alert rules with the ``for`` of FAST_ALERTS shortened, expressions untouched."""
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] in FAST_ALERTS:
                rule["for"] = FAST_ALERTS[rule["alert"]]
    path = folder / "alerts.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


@pytest.fixture
def observed(workspace: Path, nats_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Prometheus]:
    """`hookbus up` with a few hooks and a trigger, and a real Prometheus scraping it and nothing else.

    Everything else (the demo, the workload, hook processes) is a process of its own that nobody scrapes:
    the dashboards and alerts must get their data through `hookbus up`'s fleet series.
    """
    prometheus_bin = require_binary("prometheus")
    monkeypatch.setenv(INTERVAL_ENV, "0.5")  # counters reports from this process and its children, twice a second
    loop = workspace / "loop.sh"
    loop.write_text(LOOP_SCRIPT)
    loop.chmod(0o700)
    loop_hook = {"id": "loop", "command": str(loop)}
    (workspace / "hooks.json").write_text(json.dumps({"hooks": {**HOOKS, "eva.custom.loop": [loop_hook]}}))
    (workspace / "triggers.yaml").write_text(TRIGGERS)
    up = UpProcess(workspace, "--nats-url", nats_url)
    prom = Prometheus(
        prometheus_bin,
        {"hookbus": [up.metrics_url.split("//")[1].split("/")[0]]},
        rule_files=[fast_rules(workspace)],
    )
    try:
        prom.start()
        yield prom
    finally:
        prom.stop()
        up.close()


async def wait_for_data(prom: Prometheus, queries: list[tuple[str, str]], timeout: float = 120) -> list[str]:
    """Poll until every query answers with data (or ``timeout``); return those still empty."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        empty = []
        for title, expr in queries:
            answer = await asyncio.to_thread(prom.query, expr)
            assert answer["status"] == "success", f"{title}: {expr}: {answer.get('error')}"
            if not answer["data"]["result"]:
                empty.append(f"{title}: {expr}")
        if not empty or loop.time() > deadline:
            return empty
        await asyncio.sleep(0.5)


def value(prom: Prometheus, expr: str) -> float:
    result = prom.query(expr)["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


async def settles(prom: Prometheus, expr: str, good: Callable[[float], bool], what: str) -> None:
    """Wait (bounded) until the value of ``expr`` is ``good``."""

    async def holds() -> bool:
        return good(await asyncio.to_thread(value, prom, expr))

    await wait_until(holds, timeout=90, what=what)


async def test_every_dashboard_query_parses_and_returns_data(observed: Prometheus, nats_url: str) -> None:
    demo = await asyncio.to_thread(
        run_cli, "demo", "--nats-url", nats_url, "--sessions", "8", "--pace", "0", "--seed", "3", timeout=180
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    await workload(nats_url)
    queries = [
        (f"{name} / {title}", expr)
        for name in ("hookbus.json", "agents.json", "governance.json")
        for title, expr in dashboard_queries(name)
    ]
    empty = await wait_for_data(observed, queries)
    assert not empty, "queries without data:\n" + "\n".join(empty)
    for title, expr in dashboard_queries("nats.json"):  # the exporter is not running here: parsing only
        answer = await asyncio.to_thread(observed.query, expr)
        assert answer["status"] == "success", f"nats.json / {title}: {expr}: {answer.get('error')}"


async def test_fleet_and_agent_metrics_hold_the_workload(observed: Prometheus, nats_url: str) -> None:
    guard = await workload(nats_url)
    mw = f'handler="{guard}.no_rm"'
    exact = {
        'sum(hookbus_agent_llm_responses_total{job="hookbus"})': 20,
        'sum(hookbus_agent_llm_responses_total{job="hookbus",outcome="error"})': 4,
        'sum(hookbus_agent_llm_duration_seconds_count{job="hookbus",model="gpt-4o"})': 10,
        'sum(hookbus_agent_tool_calls_total{job="hookbus",tool="write_file"})': 7,
        'sum(hookbus_agent_turns_total{job="hookbus",outcome="failed"})': 4,
        'sum(hookbus_fleet_events_total{subject="prx.lifecycle.llm_response"})': 20,
        'sum(hookbus_fleet_events_total{subject="eva.custom.note"})': 20,
        f'sum(hookbus_fleet_middleware_decisions_total{{{mw},decision="cancel"}})': 6,
        f'sum(hookbus_fleet_middleware_decisions_total{{{mw},decision="patch"}})': 3,
        f'sum(hookbus_fleet_middleware_decisions_total{{{mw},decision="continue"}})': 3,
        f'sum(hookbus_fleet_middleware_calls_total{{{mw},outcome="failed"}})': 3,
        f"sum(hookbus_fleet_middleware_fail_closed_cancels_total{{{mw}}})": 3,
        f"sum(hookbus_fleet_middleware_duration_seconds_count{{{mw}}})": 12,
        'sum(hookbus_fleet_shell_hook_runs_total{hook="ok"})': 20,
        'sum(hookbus_fleet_shell_hook_duration_seconds_count{hook="ok"})': 20,
        'sum(hookbus_fleet_shell_hook_failures_total{hook="fails"})': 20,
        'sum(hookbus_fleet_shell_hook_timeouts_total{hook="slow"})': 20,
        'sum(hookbus_fleet_shell_hook_refusals_total{hook="refused"})': 20,
        'sum(hookbus_fleet_trigger_fired_total{trigger="notes"})': 1,
        'sum(hookbus_fleet_trigger_suppressed_total{trigger="notes",reason="cooldown"})': 19,
    }
    at_least = {
        'sum(hookbus_fleet_events_dropped_total{reason="depth"})': 1,  # the workload's emit at the limit
        'sum(hookbus_fleet_events_refused_total{reason="malformed"})': 1,  # its raw "not an envelope"
        'sum(hookbus_fleet_handler_errors_total{subject="eva.custom.>"})': 20,
        'sum(hookbus_fleet_events_delivered_total{subject="prx.lifecycle.tool_call"})': 20,
    }
    for expr, target in exact.items():  # a count that overshoots never equals: the wait fails
        await settles(observed, expr, functools.partial(operator.eq, target), f"{expr} == {target}")
    for expr, target in at_least.items():
        await settles(observed, expr, functools.partial(operator.le, target), f"{expr} >= {target}")
    # Only `hookbus up` is scraped: none of the above came from the processes that did the work.
    jobs = {series["metric"]["job"] for series in observed.query("up")["data"]["result"]}
    assert jobs == {"hookbus"}


async def test_the_recursion_alert_fires_for_a_hook_loop_driven_by_hookbus_emit(
    observed: Prometheus, nats_url: str
) -> None:
    """A hook that re-emits what it reacts to: each `hookbus emit` carries depth + 1, the one at the limit
    drops its event and reports the drop before it exits, and the alert reads the fleet series."""
    await asyncio.to_thread(observed.wait_for_series, 'hookbus_fleet_events_dropped_total{reason="depth"}')
    assert value(observed, 'sum(hookbus_fleet_events_dropped_total{reason="depth"})') == 0
    started = await asyncio.to_thread(run_cli, "emit", "eva.custom.loop", "{}", "--nats-url", nats_url)
    assert started.returncode == 0, started.stderr
    firing = 'ALERTS{alertname="HookbusRecursionLimitHit",alertstate="firing"}'
    await asyncio.to_thread(observed.wait_for_series, firing, 180)
    # The last hook's run is journaled when its process has exited, after its emit reported the drop.
    for expr, target in (
        ('sum(hookbus_fleet_shell_hook_runs_total{hook="loop"})', 8),  # depths 0 to 7
        ('sum(hookbus_fleet_events_dropped_total{reason="depth"})', 1),
        ('sum(hookbus_fleet_events_total{subject="eva.custom.loop"})', 8),
    ):
        await settles(observed, expr, functools.partial(operator.eq, target), f"{expr} == {target}")
