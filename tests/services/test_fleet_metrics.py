"""Fleet metrics from the bus: counters reports, journal entries and events into one receiver, checked as hostile."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import AsyncIterator

import msgspec
import orjson
import pytest

from bus import Bus
from bus._core.depth import DEPTH_ENV, set_depth
from bus._core.subjects import counters_subject
from bus._counters import INTERVAL_ENV, MIDDLEWARE_PER_MESSAGE, CountersMsg, MiddlewareCountsMsg, _reports, _Totals
from bus._journal.entries import JournalEntry
from bus._middleware.kernel.metrics import BUCKETS
from subscribers.fleet_metrics._fleet_series import INVALID, FleetMetrics
from subscribers.fleet_metrics._reports import MAX_COUNT, MAX_KEYS
from subscribers.fleet_metrics.receiver import FleetReceiver
from tests.conftest import hookbus_cmd, run_cli
from tests.support.waiting import wait_until


@pytest.fixture
def quiet_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's Buses send no counters reports: only what a test sends reaches its receiver."""
    monkeypatch.setenv(INTERVAL_ENV, "0")


@pytest.fixture
async def fleet(nats_url: str, quiet_reports: None) -> AsyncIterator[FleetMetrics]:
    async with Bus(nats_url, name="fleet-receiver") as bus:
        receiver = await FleetReceiver(bus.port, registry=None).start()
        yield receiver.fleet
        await receiver.stop()


def report(**fields: object) -> bytes:
    return orjson.dumps({"process": "test:1", **fields})


async def send_reports(nats_url: str, fleet: FleetMetrics, reports: list[bytes]) -> None:
    """Publish raw reports and wait until the receiver has read them all (accepted, clamped or refused)."""
    before = fleet.reports.total()
    async with Bus(nats_url, name="reporter") as bus:
        for data in reports:
            await bus.port.publish_raw(counters_subject("someone"), data)
        await bus.flush()
    await wait_until(lambda: fleet.reports.total() == before + len(reports), what="every report read")


async def test_a_bus_reports_what_it_dropped_when_it_closes(nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Bus(nats_url, name="fleet-receiver") as bus:
        receiver = await FleetReceiver(bus.port, registry=None).start()
        monkeypatch.setenv(INTERVAL_ENV, "3600")  # only the report at close
        async with Bus(nats_url, name="agent") as agent:
            set_depth(8)
            try:
                assert await agent.emit("eva.custom.loop", {}) is False
            finally:
                set_depth(0)
        await wait_until(lambda: receiver.fleet.dropped.values[("depth",)] >= 1, what="the depth drop reported")
        await receiver.stop()


async def test_hookbus_emit_at_the_depth_limit_reports_its_drop_before_exiting(
    nats_url: str, fleet: FleetMetrics
) -> None:
    done = run_cli("emit", "eva.custom.loop", "{}", "--nats-url", nats_url, env={DEPTH_ENV: "8", INTERVAL_ENV: "5"})
    assert done.returncode == 0, done.stderr
    await wait_until(lambda: fleet.dropped.values[("depth",)] == 1, what="the emit's depth drop")
    assert fleet.events.total() == 0  # the event itself never went out


async def test_hostile_reports_are_refused_or_clamped_never_trusted(nats_url: str, fleet: FleetMetrics) -> None:
    buckets = [0] * (len(BUCKETS) + 1)
    hostile = [
        b"not json",
        b"[1, 2]",
        report(dropped={"depth": -5}),  # negative: the schema refuses the whole report
        report(truncated="many"),
        report(dropped={"depth": 10**15}),  # capped at MAX_COUNT
        report(delivered={f"s{i}": 1 for i in range(MAX_KEYS + 500)}),  # cut at MAX_KEYS
        report(handler_errors={"bad subject \u00fc": 2}),  # a label of the wrong shape
        report(
            middleware=[
                {"handler": "m.h", "stage": "tool.call", "calls": {"ok": 1, "pwned": 9}, "decisions": {"hack": 3}},
                {"handler": "m.h", "stage": "tool.call", "latency": [1, 2, 3]},  # not the kernel's buckets
                {"handler": "m.h", "stage": "tool.call", "latency": [1, *buckets[1:]], "latency_sum": 1e12},
            ]
        ),
        report(dropped={f"reason{i}": 1 for i in range(100)}),  # more reasons than the cap
    ]
    await send_reports(nats_url, fleet, hostile)
    assert fleet.reports.values == {("refused",): 4, ("clamped",): 3, ("accepted",): 2}
    assert fleet.dropped.values[("depth",)] == MAX_COUNT
    assert len(fleet.delivered.values) == 256 + 1  # the reported subjects' cap, then "other"
    assert sum(fleet.delivered.values.values()) == MAX_KEYS
    assert fleet.handler_errors.values == {(INVALID,): 2}
    assert fleet.mw_calls.values == {("m.h", "tool.call", "ok"): 1}
    assert fleet.mw_decisions.values == {}
    (series,) = fleet.mw_duration.values.values()
    assert series[0][0] == 1 and series[1][0] == 60.0  # one reaction: at most 60 s
    assert len([key for key in fleet.dropped.values if key[0].startswith("reason")]) < 32
    assert fleet.dropped.values[("other",)] > 0
    # Reported labels have caps of their own: the events the receiver sees still get theirs.
    async with Bus(nats_url, name="agent") as bus:
        await bus.emit("eva.custom.after_flood", {})
    await wait_until(lambda: fleet.events.total() == 1, what="the event counted")
    assert list(fleet.events.values) == [("eva.custom.after_flood", "unknown")]


async def test_honest_reports_are_counted_as_sent(nats_url: str, fleet: FleetMetrics) -> None:
    latency = [0] * (len(BUCKETS) + 1)
    latency[3] = 2
    honest = CountersMsg(
        process="h:1",
        dropped={"slow_consumer": 3},
        truncated=2,
        delivered={"prx.lifecycle.tool_call": 5},
        handler_errors={"eva.custom.>": 1},
        disconnects=1,
        reconnects=1,
        middleware=[
            MiddlewareCountsMsg(
                handler="guard.no_rm",
                stage="tool.call",
                calls={"ok": 1, "timeout": 1},
                decisions={"cancel": 2},
                fail_closed=1,
                latency=latency,
                latency_sum=0.01,
            )
        ],
    )
    await send_reports(nats_url, fleet, [msgspec.json.encode(honest)])
    assert fleet.reports.values == {("accepted",): 1}
    assert fleet.dropped.values[("slow_consumer",)] == 3
    assert fleet.truncated.total() == 2 and fleet.disconnects.total() == 1 and fleet.reconnects.total() == 1
    assert fleet.delivered.values == {("prx.lifecycle.tool_call",): 5}
    assert fleet.mw_calls.values == {("guard.no_rm", "tool.call", "ok"): 1, ("guard.no_rm", "tool.call", "timeout"): 1}
    assert fleet.mw_decisions.values == {("guard.no_rm", "tool.call", "cancel"): 2}
    assert fleet.mw_fail_closed.values == {("guard.no_rm", "tool.call"): 1}
    buckets, seconds = fleet.mw_duration.values[("guard.no_rm", "tool.call")]
    assert buckets == latency and seconds == [0.01]


async def test_journal_entries_and_events_are_counted_and_bad_ones_refused(nats_url: str, fleet: FleetMetrics) -> None:
    def entry(kind: str, who: str, decision: str, cause: str | None = None) -> JournalEntry:
        return JournalEntry(kind=kind, point="eva.custom.note", phase="run", who=who, decision=decision, cause=cause,
                            duration_ms=20.0)  # fmt: skip

    entries = [
        entry("shell_hook", "ok", "ok"),
        entry("shell_hook", "bad", "failed", "exit 1"),
        entry("shell_hook", "slow", "timeout"),
        entry("shell_hook", "nope", "refused", "metacharacters"),
        entry("trigger", "notes", "fired"),
        entry("trigger", "notes", "suppressed", "cooldown: fired 1.0s ago"),
        entry("middleware", "guard.no_rm", "cancel"),  # middleware is counted from the kernels' reports
    ]
    async with Bus(nats_url, name="agent", source="agent-7") as bus:
        for one in entries:
            await bus.port.publish_raw(one.subject(None), one.encode())
        await bus.port.publish_raw(entries[0].subject(None).replace("shell_hook", "trigger"), entries[0].encode())
        await bus.port.publish_raw("hookbus.journal.shell_hook", b"{not json")
        for _ in range(3):
            await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})
        await bus.port.publish_raw("prx.lifecycle.tool_call", b"not an envelope")
        await bus.flush()
    await wait_until(lambda: fleet.entries.total() == len(entries) + 2, what="every entry read")
    await wait_until(lambda: fleet.events.total() == 3 and fleet.refused.total() == 1, what="every event read")
    assert fleet.entries.values == {("counted",): 6, ("ignored",): 1, ("refused",): 2}
    assert fleet.hook_runs.values == {
        ("ok", "eva.custom.note"): 1,
        ("bad", "eva.custom.note"): 1,
        ("slow", "eva.custom.note"): 1,
    }
    assert fleet.hook_failures.total() == 1 and fleet.hook_timeouts.total() == 1
    assert fleet.hook_refusals.values == {("nope", "eva.custom.note"): 1}
    assert sum(fleet.hook_duration.values[("ok", "eva.custom.note")][0]) == 1
    assert fleet.fired.values == {("notes",): 1}
    assert fleet.suppressed.values == {("notes", "cooldown"): 1}
    assert fleet.events.values == {("prx.lifecycle.tool_call", "agent-7"): 3}
    assert fleet.refused.values[("malformed",)] == 1


async def test_receivers_in_the_queue_group_count_each_event_once(nats_url: str, quiet_reports: None) -> None:
    async with Bus(nats_url, name="fleet-a") as bus_a, Bus(nats_url, name="fleet-b") as bus_b:
        a = await FleetReceiver(bus_a.port, registry=None).start()
        b = await FleetReceiver(bus_b.port, registry=None).start()
        async with Bus(nats_url, name="agent") as agent:
            for i in range(400):
                await agent.emit(f"eva.custom.n{i % 4}", {"i": i})
            await agent.flush()

        def counted() -> float:
            return a.fleet.events.total() + b.fleet.events.total()

        # Equality, not at-least: a duplicate would overshoot and the wait would fail.
        await wait_until(lambda: counted() == 400, what="400 events counted once")
        assert a.fleet.events.total() > 0 and b.fleet.events.total() > 0  # both took a share
        async with Bus(nats_url, name="agent") as agent:  # a barrier after them: nothing more arrives
            for i in range(40):
                await agent.emit("eva.custom.barrier", {"i": i})
        await wait_until(lambda: counted() == 440, what="the barrier counted once")
        await a.stop()
        await b.stop()


def test_a_large_middleware_report_is_split_and_empty_changes_send_nothing() -> None:
    now = _Totals(
        calls={(f"m.h{i}", "tool.call", "ok"): i + 1 for i in range(MIDDLEWARE_PER_MESSAGE * 2 + 1)},
        dropped={"depth": 2},
    )
    reports = _reports(now, _Totals(dropped={"depth": 1}))
    assert [len(r.middleware) for r in reports] == [MIDDLEWARE_PER_MESSAGE, MIDDLEWARE_PER_MESSAGE, 1]
    assert reports[0].dropped == {"depth": 1} and reports[1].dropped == {}
    pairs = MIDDLEWARE_PER_MESSAGE * 2 + 1
    assert sum(entry.calls["ok"] for r in reports for entry in r.middleware) == pairs * (pairs + 1) // 2
    assert _reports(now, now) == []


async def test_hookbus_metrics_serves_the_fleet_series(nats_url: str, quiet_reports: None) -> None:
    proc = subprocess.Popen(
        [*hookbus_cmd(), "metrics", "--nats-url", nats_url, "--metrics-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        found = re.search(r"(http://\S+/metrics)", ready)
        assert found and "ready" in ready, ready + (proc.stderr.read() if proc.stderr else "")
        async with Bus(nats_url, name="agent", source="agent-m") as agent:
            for _ in range(5):
                await agent.emit("eva.custom.metrics_cli", {})

        def scraped() -> bool:
            text = urllib.request.urlopen(found.group(1), timeout=5).read().decode()
            line = 'hookbus_fleet_events_total{agent="agent-m",subject="eva.custom.metrics_cli"} 5.0'
            return line in text

        await wait_until(scraped, what="the five events on hookbus metrics' /metrics")
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert proc.returncode == 0
