"""The middleware metrics snapshot, bus-wide: GET /api/middleware/metrics and hookbus chain --stats."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bus import Bus, Module, Patch
from bus._counters import INTERVAL_ENV
from bus.testing import serving, wait_for_chain
from subscribers.fleet_metrics._middleware_snapshot import quantile_ms
from subscribers.http_api._console_api import Console
from subscribers.http_api._live import LiveFeed
from subscribers.http_api._middleware_metrics import SNAPSHOT
from subscribers.http_api.server import make_app, serve
from tests.conftest import run_cli, unique
from tests.support.waiting import wait_until

TOKEN = "t" * 32


def _module(stage: str) -> Module:
    mod = Module(unique("stats"))

    @mod.stage(stage)
    async def tag(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({"tagged": True})

    @mod.stage(stage, after="tag")
    async def boom(stage: str, payload: dict[str, Any]) -> Patch:
        raise RuntimeError("boom at the end")

    return mod


async def test_the_snapshot_adds_up_every_kernel_process(kernel: Bus, bus: Bus, nats_url: str, tmp_path: Path) -> None:
    stage = f"custom.{unique('m')}"
    mod = _module(stage)
    tag, boom = f"{mod.name}.tag", f"{mod.name}.boom"
    view = await bus.middleware.start()
    console = Console(bus, view, tmp_path, LiveFeed(bus))
    app = make_app(tmp_path / "hooks.json", TOKEN, console=console)
    async with serving(mod, nats_url), serve(app, "127.0.0.1", 0) as base, aiohttp.ClientSession() as http:
        await wait_for_chain(kernel, stage, [tag, boom])
        for _ in range(2):  # two kernel processes; each reports its counts when it closes
            done = await asyncio.to_thread(run_cli, "intercept", stage, "{}", "--nats-url", nats_url)
            assert done.returncode == 0 and '"tagged":true' in done.stdout, done.stderr
        snapshot = app[SNAPSHOT].current
        assert snapshot is not None

        def rows() -> dict[str, dict[str, Any]]:
            return {row["handler"]: row for row in snapshot.snapshot() if row["stage"] == stage}

        await wait_until(lambda: rows().get(boom, {}).get("calls") == 2, what="both processes' reports")
        await wait_until(lambda: "last_error" in rows().get(boom, {}), what="the fault's journal entry")
        got = rows()
        assert got[tag]["calls"] == 2 and got[tag]["decisions"] == {"patch": 2} and got[tag]["faults"] == {}
        assert got[boom]["faults"] == {"failed": 2} and got[boom]["decisions"] == {"continue": 2}
        assert got[boom]["last_error"]["outcome"] == "failed"
        assert "boom at the end" in got[boom]["last_error"]["cause"] and got[boom]["last_error"]["time"]
        assert got[tag]["p50_ms"] is not None and got[tag]["p95_ms"] >= got[tag]["p50_ms"]
        async with http.get(f"{base}/api/middleware/metrics") as refused:
            assert refused.status == 401
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with http.get(f"{base}/api/middleware/metrics", headers=headers) as answered:
            assert answered.status == 200
            body = await answered.json()
        listed = {row["handler"]: row for row in body["metrics"] if row["stage"] == stage}
        assert listed[boom]["faults"] == {"failed": 2} and listed[tag]["decisions"] == {"patch": 2}


async def test_chain_stats_lists_what_the_kernels_report(nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stage = f"custom.{unique('s')}"
    mod = _module(stage)
    monkeypatch.setenv(INTERVAL_ENV, "0.2")  # this kernel reports five times a second
    async with Bus(nats_url, name="reporting", trust_new=True) as kernel, serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.tag", f"{mod.name}.boom"])
        listing = asyncio.create_task(
            asyncio.to_thread(run_cli, "chain", stage, "--stats", "2", "--nats-url", nats_url)
        )
        while not listing.done():  # calls until the listener's window closes: some land inside it
            await kernel.intercept(stage, {})
        done = await listing
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if f"{mod.name}.boom  {stage}" in line)
    assert "failed" in line and "last error failed" in line and "boom at the end" in line, done.stdout
    assert "patch" in next(line for line in done.stdout.splitlines() if f"{mod.name}.tag  {stage}" in line)


def test_quantiles_read_bucket_bounds() -> None:
    assert quantile_ms([0] * 16, 0.5) is None
    buckets = [0] * 16
    buckets[2], buckets[15] = 9, 1  # nine at most 2.5 ms, one past the last bound
    assert quantile_ms(buckets, 0.5) == 2.5 and quantile_ms(buckets, 0.95) is None
