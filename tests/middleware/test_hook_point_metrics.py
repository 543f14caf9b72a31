"""GET /v1/hooks/metrics: agent_os's metrics per (hook, point), counted bus-wide on a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bus import Bus, Module, Patch
from bus._counters import INTERVAL_ENV
from bus.testing import serving, wait_for_chain
from subscribers.fleet_metrics._middleware_snapshot import as_hook_point
from subscribers.http_api._console_api import Console
from subscribers.http_api._live import LiveFeed
from subscribers.http_api._middleware_metrics import SNAPSHOT
from subscribers.http_api.server import make_app, serve
from tests.conftest import unique
from tests.support.waiting import wait_until

TOKEN = "v" * 32
ROUTE = "/v1/hooks/metrics"


def _module(first: str, second: str) -> Module:
    mod = Module(unique("points"))

    @mod.stage(first)
    async def tag(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({"tagged": True})

    @mod.stage(first, after="tag")
    async def boom(stage: str, payload: dict[str, Any]) -> Patch:
        raise RuntimeError(f"boom at {stage}")

    @mod.stage(first, after="boom", timeout=0.2)
    async def slow(stage: str, payload: dict[str, Any]) -> Patch:
        await asyncio.sleep(2)  # past its timeout: the kernel stops waiting
        return Patch({"late": True})

    @mod.stage(second)
    async def boom_second(stage: str, payload: dict[str, Any]) -> Patch:
        raise ValueError(f"boom at {stage}")

    return mod


async def test_calls_panics_timeouts_and_the_last_error_are_counted_per_hook_and_point(
    bus: Bus, nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = f"custom.{unique('p')}", f"custom.{unique('q')}"
    mod = _module(first, second)
    tag, boom, slow, boom_second = (f"{mod.name}.{name}" for name in ("tag", "boom", "slow", "boom_second"))
    monkeypatch.setenv(INTERVAL_ENV, "0.2")  # the kernel below reports five times a second
    view = await bus.middleware.start()
    app = make_app(tmp_path / "hooks.json", TOKEN, console=Console(bus, view, tmp_path, LiveFeed(bus)))
    async with (
        serving(mod, nats_url),
        Bus(nats_url, name="reporting", trust_new=True) as kernel,
        serve(app, "127.0.0.1", 0) as base,
        aiohttp.ClientSession() as http,
    ):
        await wait_for_chain(kernel, first, [tag, boom, slow])
        await wait_for_chain(kernel, second, [boom_second])
        for _ in range(3):
            decision = await kernel.intercept(first, {})
            assert decision == Patch({"tagged": True}), decision  # the faults read as continue (fail-open)
        await kernel.intercept(second, {})
        snapshot = app[SNAPSHOT].current
        assert snapshot is not None

        def rows() -> dict[tuple[str, str], dict[str, Any]]:
            return {(row["hook"], row["point"]): row for row in snapshot.hook_points()}

        def counted() -> bool:
            got = rows()
            done = [got.get(key, {}).get("calls") for key in ((tag, first), (boom, first), (slow, first))]
            errors = [
                got.get(key, {}).get("last_error") for key in ((boom, first), (slow, first), (boom_second, second))
            ]
            return done == [3, 3, 3] and got.get((boom_second, second), {}).get("calls") == 1 and all(errors)

        await wait_until(counted, what="the kernel's reports and the faults' journal entries")

        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            async with http.get(f"{base}{ROUTE}", headers=headers) as refused:
                assert refused.status == 401, headers
                assert await refused.json() == {"error": "missing or wrong bearer token"}
        async with http.get(f"{base}{ROUTE}", headers={"Authorization": f"Bearer {TOKEN}"}) as answered:
            assert answered.status == 200
            body = await answered.json()
    listed = {(row["hook"], row["point"]): row for row in body["metrics"]}
    assert body["since"] > 0
    fields = {"hook", "point", "calls", "panics", "timeouts", "total_ms", "mean_ms", "last_error", "last_error_at"}
    assert all(set(row) == fields for row in listed.values())
    ok, raised, late, other = (
        listed[(tag, first)],
        listed[(boom, first)],
        listed[(slow, first)],
        listed[(boom_second, second)],
    )
    assert (ok["calls"], ok["panics"], ok["timeouts"], ok["last_error"]) == (3, 0, 0, None)
    assert (raised["calls"], raised["panics"], raised["timeouts"]) == (3, 3, 0)
    assert raised["last_error"].startswith("failed: ") and f"boom at {first}" in raised["last_error"]
    assert (late["calls"], late["panics"], late["timeouts"]) == (3, 0, 3)
    assert late["last_error"].startswith("timeout: ") and late["last_error_at"]
    assert (other["calls"], other["panics"], other["timeouts"]) == (1, 1, 0)
    assert f"boom at {second}" in other["last_error"] and f"boom at {first}" not in other["last_error"]
    assert (boom_second, first) not in listed and (boom, second) not in listed  # each pair its own row
    for row in (ok, raised, other):
        assert row["total_ms"] >= row["mean_ms"] > 0  # the total of every timed call, the mean of one


def test_the_agent_os_row_counts_only_the_turns_that_called_the_handler() -> None:
    row = {
        "handler": "m.h", "stage": "s", "calls": 7, "decisions": {}, "panics": 1, "timeouts": 2,
        "faults": {"failed": 1, "timeout": 2, "untrusted": 3}, "total_ms": 12.0, "mean_ms": 3.0,
        "last_error": {"outcome": "timeout", "cause": "no answer in 0.2 s", "time": "2026-12-02T16:30:00Z"},
    }  # fmt: skip
    assert as_hook_point(row) == {
        "hook": "m.h", "point": "s", "calls": 4, "panics": 1, "timeouts": 2, "total_ms": 12.0, "mean_ms": 3.0,
        "last_error": "timeout: no answer in 0.2 s", "last_error_at": "2026-12-02T16:30:00Z",
    }  # fmt: skip
