"""The dashboards in the operator's own set-up: the shipped scrape interval, only `hookbus up` scraped.

`hookbus up` runs as the README starts it (embedded NATS, a workspace with a
hook and a trigger), a real Prometheus scrapes it at the interval of the
shipped deploy/prometheus/prometheus.yml (15 s), and `hookbus demo` plays its
default run. Counters of what is known at start are there at zero before
anything happens (so the first events show as rates), the NATS dashboard has
data from `hookbus up` alone, and the fleet's rates move, by agent named.
"""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import require_binary, run_cli
from .prometheus import Prometheus
from .test_cli import UpProcess
from .test_dashboards import DEPLOY, dashboard_queries
from .waiting import wait_until

SHIPPED = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
HOOKS = {"hooks": {"agent_end": [{"id": "op-audit", "command": "/bin/true"}]}}
TRIGGERS = """
triggers:
  - name: op-spend
    on: eva.spend.day
    prompt: "We spent {payload.total_usd} USD."
    agent: nobody-here
"""


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[tuple[UpProcess, Prometheus]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "hooks.json").write_text(json.dumps(HOOKS))
    (workspace / "triggers.yaml").write_text(TRIGGERS)
    up = UpProcess(workspace)
    target = up.metrics_url.split("//")[1].split("/")[0]
    interval = SHIPPED["global"]["scrape_interval"]
    assert interval == "15s", "the test runs at the shipped interval"
    prom = Prometheus(require_binary("prometheus"), {"hookbus": [target]}, interval=interval)
    try:
        prom.start()
        yield up, prom
    finally:
        prom.stop()
        up.close()


def series(prom: Prometheus, expr: str) -> list[dict[str, object]]:
    answer = prom.query(expr)
    assert answer["status"] == "success", f"{expr}: {answer.get('error')}"
    return list(answer["data"]["result"])


@pytest.mark.timeout(400)
async def test_a_fresh_bus_shows_its_first_events_as_rates_with_only_hookbus_up_scraped(
    shipped: tuple[UpProcess, Prometheus],
) -> None:
    up, prom = shipped
    # Known at start, at zero before anything happened: the first run and firing are a rise, not a first sample.
    await asyncio.to_thread(prom.wait_for_series, 'hookbus_fleet_shell_hook_runs_total{hook="op-audit"} == 0', 60)
    await asyncio.to_thread(prom.wait_for_series, 'hookbus_fleet_trigger_fired_total{trigger="op-spend"} == 0', 60)
    demo = await asyncio.to_thread(run_cli, "demo", "--nats-url", up.nats_url, "--seed", "5", timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr

    async def moved(expr: str) -> bool:
        found = await asyncio.to_thread(series, prom, expr)
        if any(float(s["value"][1]) > 0 for s in found):  # type: ignore[index]
            return True
        await asyncio.sleep(1)  # Prometheus learns something new every 15 s: no need to ask faster
        return False

    for expr in (
        'sum(rate(hookbus_fleet_shell_hook_runs_total{hook="op-audit"}[1m]))',  # the demo's agent_end events
        'sum by (handler) (rate(hookbus_fleet_middleware_decisions_total{handler="demo-guard.no_rm"}[1m]))',
        'sum by (agent) (rate(hookbus_fleet_events_total{agent="agent-1"}[1m]))',  # "Events by agent" names it
        'sum(rate(hookbus_fleet_shell_hook_runs_total{hook="demo-audit"}[1m]))',  # the demo's own hooks
        'sum(rate(hookbus_fleet_shell_hook_failures_total{hook="demo-llm-check"}[1m]))',
    ):
        await wait_until(functools.partial(moved, expr), timeout=60, what=f"{expr} moving")

    async def named() -> bool:  # the analyst answers the trigger at the demo's end: seen a scrape later
        found = await asyncio.to_thread(series, prom, "sum by (agent) (hookbus_fleet_events_total)")
        if {"agent-1", "agent-2", "agent-3", "demo-analyst", "hookbus-demo"} <= {s["metric"]["agent"] for s in found}:  # type: ignore[index]
            return True
        await asyncio.sleep(1)
        return False

    await wait_until(named, timeout=60, what="every demo agent named in Events by agent")
    # The NATS dashboard from `hookbus up` alone (its embedded server's figures), every panel with data.
    empty = [f"{title}: {expr}" for title, expr in dashboard_queries("nats.json") if not series(prom, expr)]
    assert empty == [], "NATS panels without data:\n" + "\n".join(empty)
    traffic = "sum(rate(gnatsd_varz_in_msgs[1m]))"
    await wait_until(lambda: moved(traffic), timeout=60, what="the NATS message rate moving")
    jobs = {s["metric"]["job"] for s in series(prom, "up")}  # type: ignore[index]
    assert jobs == {"hookbus"}, "only hookbus up is scraped"


def test_the_embedded_servers_monitoring_is_never_opened_beyond_loopback(tmp_path: Path) -> None:
    """The monitoring endpoint has no authentication: with `--host` on every address, `hookbus up` opens none."""
    up = UpProcess(tmp_path / "ws", "--host", "0.0.0.0")
    try:
        servers = [
            Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            for pid in (p.name for p in Path("/proc").iterdir() if p.name.isdigit())
            if _parent(pid) == up.proc.pid
        ]
        nats = [cmd for cmd in servers if cmd and cmd[0].endswith(b"nats-server")]
        assert nats, "hookbus up runs its embedded server"
        assert all(b"-m" not in cmd for cmd in nats), nats
        with urllib.request.urlopen(up.metrics_url.replace("0.0.0.0", "127.0.0.1"), timeout=10) as reply:
            assert b"gnatsd_varz" not in reply.read()
    finally:
        up.close()


def _parent(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
