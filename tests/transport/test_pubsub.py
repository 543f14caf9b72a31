"""emit and subscribe against a real server: patterns, queue groups, bad input, failing handlers."""

from __future__ import annotations

import asyncio
from collections import Counter

import orjson
import pytest

from bus import Bus, BusClosedError, BusState, ConnectError, Event, NotSerializableError, PayloadError, SubjectError
from bus.testing import EventRecorder
from tests.support.waiting import barrier, barrier_payload, is_barrier, probe_until, wait_until, without_barriers

TOOL_CALL = {"tool": "shell", "success": True, "output": "ok"}


async def settle(bus: Bus) -> None:
    """Make sure subscriptions are registered on the server before publishing."""
    await bus.flush()


async def test_emit_and_receive_envelope(bus: Bus) -> None:
    rec = EventRecorder()
    await bus.subscribe("prx.lifecycle.tool_call", rec)
    await settle(bus)
    assert await bus.emit("prx.lifecycle.tool_call", TOOL_CALL, session_id="s1")
    [event] = await rec.wait_for(1)
    assert event.subject == "prx.lifecycle.tool_call"
    assert event.event == "tool_call"
    assert event.payload == TOOL_CALL
    assert event.session_id == "s1"
    assert event.depth == 0
    wire = orjson.loads(event.raw)
    assert set(wire) == {"event", "timestamp", "session_id", "payload", "id", "depth"}
    assert wire["payload"]["tool"] == "shell"  # what a PRX script reading .payload.tool sees


@pytest.mark.parametrize(
    ("pattern", "subjects", "expected"),
    [
        ("prx.lifecycle.tool_call", ["prx.lifecycle.tool_call", "prx.lifecycle.error"], ["prx.lifecycle.tool_call"]),
        ("prx.lifecycle.*", ["prx.lifecycle.tool_call", "eva.turn.completed"], ["prx.lifecycle.tool_call"]),
        (
            "eva.>",
            ["eva.turn.completed", "eva.custom.deploy", "prx.lifecycle.error"],
            ["eva.turn.completed", "eva.custom.deploy"],
        ),
        (
            "prx.*",
            ["prx.lifecycle.agent_start", "prx.metrics.x", "eva.spend.day"],
            ["prx.lifecycle.agent_start", "prx.metrics.x"],
        ),
        ("*", ["prx.lifecycle.error", "eva.custom.a"], ["prx.lifecycle.error", "eva.custom.a"]),
        ("tool_call", ["prx.lifecycle.tool_call", "prx.lifecycle.tool_call_start"], ["prx.lifecycle.tool_call"]),
        ("eva.custom.*", ["eva.custom.deploy", "eva.custom.deploy.x", "eva.spend.day"], ["eva.custom.deploy"]),
    ],
)
async def test_patterns(bus: Bus, pattern: str, subjects: list[str], expected: list[str]) -> None:
    rec = EventRecorder()
    sub = await bus.subscribe(pattern, rec)
    await settle(bus)
    for subject in subjects:
        await bus.emit(subject, {})
    await barrier(bus, expected[-1], rec)  # on a subject the pattern matches, after everything else
    assert [event.subject for event in without_barriers(rec.events)] == expected
    await sub.unsubscribe()


async def test_queue_group_shares_events(nats_url: str) -> None:
    async with Bus(nats_url) as a, Bus(nats_url) as b, Bus(nats_url) as sender:
        rec_a, rec_b = EventRecorder(), EventRecorder()
        await a.subscribe("eva.custom.work", rec_a, queue="workers")
        await b.subscribe("eva.custom.work", rec_b, queue="workers")
        await a.flush()
        await b.flush()
        for i in range(200):
            await sender.emit("eva.custom.work", {"i": i})
        await sender.flush()

        await wait_until(lambda: len(rec_a.events) + len(rec_b.events) >= 200, 10, "200 events across the group")
        # Barriers from the same publisher into the group until each member got one: then each member has
        # everything the server routed to it before, and a duplicate would be in.
        await probe_until(
            lambda: sender.emit("eva.custom.work", barrier_payload()),
            lambda: any(map(is_barrier, rec_a.events)) and any(map(is_barrier, rec_b.events)),
            what="a barrier at each member",
        )
        seen = sorted(e.payload["i"] for e in without_barriers(rec_a.events + rec_b.events))
        assert seen == list(range(200))  # each event exactly once across the group
        assert rec_a.events and rec_b.events  # and both members got some


def _envelope(**changes: object) -> bytes:
    """A valid envelope for eva.custom.bad with ``changes`` applied."""
    fields = {"event": "custom.bad", "timestamp": "t", "session_id": None, "payload": {}, "id": "i", "depth": 0}
    return orjson.dumps({**fields, **changes})


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json at all", "malformed"),
        (b"[1, 2, 3]", "malformed"),
        (b'{"event": "x"}', "malformed"),
        (_envelope(event=1), "malformed"),
        (_envelope(payload=[]), "malformed"),
        (_envelope(depth=-1), "depth"),
        (_envelope(depth=True), "malformed"),
        (b"{" * 100_000, "oversize"),
        (b'{"a": "' + b"x" * 500_000 + b'"}', "oversize"),
    ],
    ids=["text", "list", "missing", "event-type", "payload-list", "negative-depth", "bool-depth", "deep", "huge"],
)
async def test_malformed_messages_leave_subscriber_alive(bus: Bus, raw: bytes, reason: str) -> None:
    rec = EventRecorder()
    await bus.subscribe("eva.custom.>", rec)
    await settle(bus)
    before = dict(bus.stats.dropped)
    await bus.port.publish_raw("eva.custom.bad", raw)
    await bus.emit("eva.custom.good", {"ok": True})
    [event] = await rec.wait_for(1)
    assert event.subject == "eva.custom.good"
    assert bus.stats.dropped - Counter(before) == Counter({reason: 1})


async def test_handler_that_raises_does_not_stop_delivery(bus: Bus) -> None:
    seen: list[int] = []

    async def flaky(event: Event) -> None:
        seen.append(event.payload["n"])
        if event.payload["n"] % 2 == 0:
            raise RuntimeError("boom")

    def sync_flaky(event: Event) -> None:
        raise ValueError("sync boom")

    await bus.subscribe("eva.custom.flaky", flaky)
    await bus.subscribe("eva.custom.flaky", sync_flaky)
    await settle(bus)
    errors_before = sum(bus.stats.handler_errors.values())
    for n in range(4):
        await bus.emit("eva.custom.flaky", {"n": n})
    await wait_until(
        lambda: len(seen) == 4 and sum(bus.stats.handler_errors.values()) - errors_before == 6, 10, "4 runs, 6 errors"
    )
    assert sorted(seen) == [0, 1, 2, 3]
    assert sum(bus.stats.handler_errors.values()) - errors_before == 6  # 2 async + 4 sync


async def test_handlers_of_one_subscription_overlap_up_to_the_bound(bus: Bus) -> None:
    running = 0
    peak = 0
    release = asyncio.Event()

    async def slow(event: Event) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    sub = await bus.subscribe("eva.custom.slow", slow, concurrency=3)
    await settle(bus)
    for n in range(6):
        await bus.emit("eva.custom.slow", {"n": n})
    await wait_until(lambda: peak == 3, 10, "three handlers in flight")
    # All six reached the subscription, and three wait for a slot: had the bound let one through,
    # its handler would have run and fewer would wait.
    await wait_until(lambda: sub.waiting == 3, 10, "the last three held back")
    assert peak == 3  # overlapped, but never more than the bound
    assert sub.in_flight == 3
    release.set()
    await wait_until(lambda: sub.in_flight == 0 and bus.stats.delivered["eva.custom.slow"] == 6, 10, "all six handled")
    assert peak == 3


@pytest.mark.parametrize(
    "subject",
    ["", "prx..tool_call", ".prx", "prx.", "prx.*", "prx.>", "prx.tool call", "prx.ü", "prx.a\r\nPUB x", 42],
)
async def test_emit_rejects_invalid_subjects(bus: Bus, subject: object) -> None:
    with pytest.raises(SubjectError, match="invalid subject"):
        await bus.emit(subject, {})  # type: ignore[arg-type]


async def test_emit_rejects_bad_payloads(bus: Bus) -> None:
    with pytest.raises(NotSerializableError, match=r"eva\.custom\.x"):
        await bus.emit("eva.custom.x", {"f": object()})
    with pytest.raises(PayloadError, match="JSON object"):
        await bus.emit("eva.custom.x", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="session_id"):
        await bus.emit("eva.custom.x", {}, session_id=7)  # type: ignore[arg-type]


async def test_bus_lifecycle(nats_url: str) -> None:
    bus = Bus(nats_url)
    assert bus.state is BusState.UNOPENED
    with pytest.raises(BusClosedError):
        await bus.emit("eva.custom.x", {})
    await bus.start()
    assert bus.state is BusState.OPEN
    await bus.close()
    assert bus.state is BusState.CLOSED
    with pytest.raises(BusClosedError):
        await bus.emit("eva.custom.x", {})
    with pytest.raises(BusClosedError, match="opened once"):
        await bus.start()


async def test_connect_error_names_the_url() -> None:
    with pytest.raises(ConnectError, match=r"nats://127\.0\.0\.1:1\b"):
        async with Bus("nats://127.0.0.1:1", connect_timeout=0.5):
            pass


async def test_default_url_comes_from_env(monkeypatch: pytest.MonkeyPatch, nats_url: str) -> None:
    monkeypatch.setenv("NATS_URL", nats_url)
    assert Bus().servers == [nats_url]
    monkeypatch.delenv("NATS_URL")
    assert Bus().servers == ["nats://127.0.0.1:4222"]


async def test_embedded_bus_runs_its_own_server() -> None:
    async with Bus(embedded=True) as bus:
        rec = EventRecorder()
        await bus.subscribe(">", rec)
        await bus.flush()
        await bus.emit("eva.custom.hello", {})
        await rec.wait_for(1)
        server = bus._embedded
        assert server is not None and server.running()
    assert not server.running()


async def test_handler_errors_are_journaled(bus: Bus) -> None:
    from bus._journal.entries import decode_entry

    entries = []

    async def take(msg: object) -> None:
        entries.append(decode_entry(msg.data))  # type: ignore[attr-defined]

    await bus.port.nc.subscribe("hookbus.journal.subscriber", cb=take)

    async def broken_later(event: Event) -> None:
        await asyncio.sleep(0)  # not a wait: fail after the first step, in the handler's task, not inline
        raise KeyError("late")

    def broken_now(event: Event) -> None:
        raise ValueError("now")

    await bus.subscribe("eva.custom.oops", broken_later)
    await bus.subscribe("eva.custom.oops", broken_now)
    await settle(bus)
    await bus.emit("eva.custom.oops", {"secret": "s3cret"}, session_id="s7")
    await wait_until(lambda: len(entries) == 2, 10, "two journal entries")
    causes = sorted(e.cause or "" for e in entries)
    assert causes == ["KeyError: 'late'", "ValueError: now"]
    assert all(e.kind == "subscriber" and e.decision == "failed" and e.session == "s7" for e in entries)
    assert all("s3cret" not in e.encode().decode() for e in entries)


async def test_events_past_the_backlog_drop_as_a_slow_consumer_and_the_rest_arrive_in_order(bus: Bus) -> None:
    release = asyncio.Event()
    got: list[int] = []

    async def slow(event: Event) -> None:
        await release.wait()
        got.append(event.payload["n"])

    sub = await bus.subscribe("eva.custom.backlog", slow, concurrency=1, pending_msgs=2)
    for n in range(5):  # one handler runs, two wait, two do not fit
        await bus.emit("eva.custom.backlog", {"n": n})
    await wait_until(lambda: bus.stats.dropped["slow_consumer"] == 2, 10, "two slow-consumer drops")
    assert sub.in_flight == 1 and sub.waiting == 2
    release.set()
    await wait_until(lambda: len(got) == 3, 10, "the running and the two held events")
    assert got == [0, 1, 2]
    await bus.emit("eva.custom.backlog", {"n": 5})  # the backlog emptied: the next event is handled at once
    await wait_until(lambda: len(got) == 4, 10, "the next event")
    assert got[-1] == 5 and sub.waiting == 0
