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
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli import UpProcess
from tests.conftest import require_binary, run_cli
from tests.services.test_dashboards import DEPLOY, dashboard_queries
from tests.support.prometheus import Prometheus
from tests.support.waiting import wait_until

BOARDS = ("hookbus.json", "agents.json", "governance.json", "nats.json")
RATE_FN = re.compile(r"\b(rate|increase)\(")
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
    # The default demo, watched while it plays: a rate reads the last minute, and the demo plays 40 s.
    playing = asyncio.create_task(
        asyncio.to_thread(run_cli, "demo", "--nats-url", up.nats_url, "--seed", "5", timeout=300)
    )

    async def moved(expr: str) -> bool:
        found = await asyncio.to_thread(series, prom, expr)
        if any(float(s["value"][1]) > 0 for s in found):  # type: ignore[index]
            return True
        await asyncio.sleep(1)  # Prometheus learns something new every 15 s: no need to ask faster
        return False

    async def named() -> bool:  # the analyst answers the trigger at the demo's end: seen a scrape later
        found = await asyncio.to_thread(series, prom, "sum by (agent) (hookbus_fleet_events_total)")
        expected = {"agent-1", "agent-2", "agent-3", "agent-edge", "demo-analyst", "hookbus-demo"}
        if expected <= {s["metric"]["agent"] for s in found}:  # type: ignore[index]
            return True
        await asyncio.sleep(1)
        return False

    queries = [(f"{name} / {title}", expr) for name in BOARDS for title, expr in dashboard_queries(name)]
    rates = [(title, expr) for title, expr in queries if RATE_FN.search(expr)]
    assert len(rates) >= 30, "most panels are rates"
    unmoved = set(rates)

    async def all_moved() -> bool:
        for title, expr in sorted(unmoved):
            if await moved(expr):
                unmoved.discard((title, expr))
        return not unmoved

    try:
        await wait_until(all_moved, timeout=90, what="every rate panel moving")
    except AssertionError:
        raise AssertionError("rate panels that never moved:\n" + "\n".join(map(str, sorted(unmoved)))) from None
    demo = await playing
    assert demo.returncode == 0, demo.stdout + demo.stderr
    await wait_until(named, timeout=60, what="every demo agent named in Events by agent")
    empty = [f"{title}: {expr}" for title, expr in queries if not await asyncio.to_thread(series, prom, expr)]
    assert empty == [], "panels without data:\n" + "\n".join(empty)
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
