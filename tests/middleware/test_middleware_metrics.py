"""Middleware metrics per (handler, stage), and the journal rule for neutral continues."""

from __future__ import annotations

import uuid
from typing import Any

from prometheus_client import REGISTRY

from bus import Bus, Cancel, Continue, Module, register_collectors
from bus._middleware.kernel.intercept import MiddlewareOptions
from bus.testing import JournalRecorder, serving, wait_for_chain

register_collectors()  # explicit: importing bus registers nothing


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_metrics_and_neutral_continues(nats_url: str) -> None:
    mod = Module(f"m{uuid.uuid4().hex[:6]}")

    @mod.stage("custom.check")
    async def passes(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    @mod.stage("custom.check", after="passes", fail_closed=True)
    async def breaks(stage: str, payload: dict[str, Any]) -> Cancel:
        if payload.get("boom"):
            raise RuntimeError("handler bug")
        return Cancel("no")

    quiet = await Bus(nats_url, trust_new=True).start()
    chatty = await Bus(nats_url, trust_new=True, middleware=MiddlewareOptions(journal_neutral=True)).start()
    try:
        journal = await JournalRecorder().attach(quiet)
        async with serving(mod, nats_url):
            for bus in (quiet, chatty):
                await wait_for_chain(bus, "custom.check", [f"{mod.name}.passes", f"{mod.name}.breaks"])
            p, b = f"{mod.name}.passes", f"{mod.name}.breaks"
            assert await quiet.intercept("custom.check", {}) == Cancel("no", b)
            assert isinstance(await quiet.intercept("custom.check", {"boom": True}), Cancel)
            entries = await journal.wait_for(2)
            # No wait for absence: a journaled neutral continue of `passes` would have gone out ahead of the
            # entry of `breaks` in the same call (the chain runs in order, one connection publishes in order).
            assert [(e.who, e.decision) for e in journal.entries] == [(b, "cancel"), (b, "failed")]
            await chatty.intercept("custom.check", {})
            await journal.wait_for(4)
            assert [(e.who, e.decision) for e in journal.entries[2:]] == [(p, "continue"), (b, "cancel")]
    finally:
        await quiet.close()
        await chatty.close()
    assert entries
    assert sample("hookbus_middleware_calls_total", handler=p, stage="custom.check", outcome="ok") == 3
    assert sample("hookbus_middleware_decisions_total", handler=p, stage="custom.check", decision="continue") == 3
    assert sample("hookbus_middleware_calls_total", handler=b, stage="custom.check", outcome="failed") == 1
    assert sample("hookbus_middleware_fail_closed_cancels_total", handler=b, stage="custom.check") == 1
    assert sample("hookbus_middleware_decisions_total", handler=b, stage="custom.check", decision="cancel") == 3
    assert sample("hookbus_middleware_duration_seconds_count", handler=p, stage="custom.check") == 3


def test_a_quiet_run_counts_as_each_rule_by_its_names_tuple_or_an_equal_one() -> None:
    """A quiet run's series is found again by its names tuple's identity or, for an equal tuple, by its names;
    folded into the handlers' series when too many runs are kept, every count stays."""
    from bus._middleware.kernel.metrics import QUIET_RUNS, MiddlewareStats

    stats = MiddlewareStats()
    names = ("f.a", "f.b")
    for _ in range(3):
        stats.observe_quiet("s", names, 0.001)
    stats.observe_quiet("s", tuple(list(names)), 0.001)  # equal, not the same tuple
    stats.observe_quiet("t", names, 0.001)  # the same tuple on another stage
    assert stats.calls[("f.a", "s", "ok")] == 4 and stats.calls[("f.b", "t", "ok")] == 1
    for index in range(QUIET_RUNS + 1):  # folds the kept runs into the handlers' series
        stats.observe_quiet("u", (f"g.{index}",), 0.001)
    stats.observe_quiet("s", names, 0.001)
    assert stats.calls[("f.a", "s", "ok")] == 5 and stats.decisions[("f.b", "s", "continue")] == 5
    assert stats.latency[("f.a", "s")].count == 5 and stats.calls[("g.0", "u", "ok")] == 1
