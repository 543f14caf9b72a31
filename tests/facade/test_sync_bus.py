"""SyncBus against a real server: emit, intercept and subscribe from many threads at once, depth, close."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from bus import Ask, Bus, BusClosedError, Cancel, Continue, Event, Module, Patch, Stage
from bus._core.errors import SyncCallError
from bus._middleware.asks.store import AskStore
from bus.sync import SyncBus
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.conftest import unique
from tests.support.waiting import wait_until

THREADS = 8
PER_THREAD = 25


def _in_threads(work: Any, count: int = THREADS) -> list[BaseException]:
    """Run ``work(i)`` on ``count`` threads started together; the exceptions they raised."""
    start = threading.Barrier(count)
    failures: list[BaseException] = []

    def run(i: int) -> None:
        start.wait(30)
        try:
            work(i)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    return failures


async def test_eight_threads_emit_intercept_and_subscribe(nats_url: str) -> None:
    guard = Module(unique("syncguard"))

    @guard.stage(Stage.TOOL_CALL)
    async def judge(stage: str, payload: dict[str, Any]) -> Continue | Cancel | Patch:
        if payload["input"]["n"] % 2:
            return Cancel(f"odd {payload['input']['n']}")
        return Patch({**payload, "input": {**payload["input"], "seen": True}})

    subject = f"eva.custom.{unique('sync')}"
    async with serving(guard, nats_url):
        sync = await asyncio.to_thread(SyncBus, nats_url, name="sync", trust_new=True)
        try:
            await asyncio.to_thread(sync.run, wait_for_chain(sync.bus, "tool.call", [f"{guard.name}.judge"]))
            received: list[Event] = []
            lock = threading.Lock()

            def record(event: Event) -> None:
                with lock:
                    received.append(event)

            await asyncio.to_thread(sync.subscribe, subject, record)
            decisions: dict[tuple[int, int], Any] = {}

            def work(t: int) -> None:
                for i in range(PER_THREAD):
                    assert sync.emit(subject, {"thread": t, "i": i}, session_id=f"s{t}")
                    decisions[(t, i)] = sync.intercept("tool.call", {"name": "shell", "input": {"n": i}})
                    assert sync.intercept("nobody.declared", {"n": i}) == Continue()  # answered in this thread

            assert await asyncio.to_thread(_in_threads, work) == []
            await wait_until(lambda: len(received) >= THREADS * PER_THREAD, what="every event")
            assert sorted((e.payload["thread"], e.payload["i"]) for e in received) == sorted(decisions)
            assert all(e.session_id == f"s{e.payload['thread']}" and e.depth == 0 for e in received)
            for (_, i), decision in decisions.items():
                if i % 2:
                    assert decision == Cancel(f"odd {i}", f"{guard.name}.judge")
                else:
                    assert decision == Patch({"name": "shell", "input": {"n": i, "seen": True}})
        finally:
            await asyncio.to_thread(sync.close)


async def test_a_sync_handler_emits_at_its_events_depth_plus_one(nats_url: str) -> None:
    first, second = f"eva.custom.{unique('d1')}", f"eva.custom.{unique('d2')}"
    sync = await asyncio.to_thread(SyncBus, nats_url, name="sync-depth")
    try:
        recorder = EventRecorder()
        test_loop = asyncio.get_running_loop()
        await asyncio.to_thread(sync.run, _subscribe_async(sync, second, recorder, test_loop))
        handler_threads: list[str] = []

        def relay(event: Event) -> None:
            handler_threads.append(threading.current_thread().name)
            sync.emit(second, {"from": event.payload["n"]})

        await asyncio.to_thread(sync.subscribe, first, relay)
        await asyncio.to_thread(sync.emit, first, {"n": 1})
        await recorder.wait_for(1)
        assert recorder.events[0].payload == {"from": 1}
        assert recorder.events[0].depth == 1
        assert handler_threads and handler_threads[0] != "hookbus-sync"  # handlers never block the loop
    finally:
        await asyncio.to_thread(sync.close)


async def _subscribe_async(
    sync: SyncBus, subject: str, recorder: EventRecorder, test_loop: asyncio.AbstractEventLoop
) -> None:
    """Subscribe on the SyncBus's loop, handing events to ``recorder`` on the test's loop."""

    async def on_event(event: Event) -> None:
        test_loop.call_soon_threadsafe(recorder, event)

    assert asyncio.get_running_loop() is sync._loop
    await sync.bus.subscribe(subject, on_event)


async def test_a_call_from_its_own_loop_is_refused_and_close_is_final(nats_url: str) -> None:
    sync = await asyncio.to_thread(SyncBus, nats_url, name="sync-close")

    async def from_the_loop() -> str:
        try:
            sync.emit("eva.custom.x", {})
        except SyncCallError as exc:
            return str(exc)
        return "no error"

    assert "own loop thread" in await asyncio.to_thread(sync.run, from_the_loop())
    await asyncio.to_thread(sync.close)
    await asyncio.to_thread(sync.close)  # idempotent
    assert not sync._thread.is_alive()
    with pytest.raises(BusClosedError):
        sync.emit("eva.custom.x", {})
    with pytest.raises(BusClosedError):
        sync.intercept("tool.call", {"name": "shell", "input": {}})


def test_an_unreachable_server_fails_the_constructor_and_leaves_no_thread() -> None:
    before = {t.ident for t in threading.enumerate()}
    from bus import ConnectError

    with pytest.raises(ConnectError):
        SyncBus("nats://127.0.0.1:1", connect_timeout=0.5)
    leftover = [t for t in threading.enumerate() if t.ident not in before and t.name == "hookbus-sync"]
    for thread in leftover:
        thread.join(5)
    assert not any(t.is_alive() for t in leftover)


async def test_an_intercept_held_by_an_ask_outlasts_the_sync_timeout(nats_url: str) -> None:
    """The SyncBus's timeout (1 s here, 30 s by default) bounds the call up to the ask, not the ask itself."""
    name = unique("asker")
    mod = Module(name)

    @mod.stage(Stage.TOOL_CALL)
    async def ask(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("a person decides", timeout=60)

    session = unique("s")
    async with serving(mod, nats_url), Bus(nats_url, name="operator") as op:
        sync = await asyncio.to_thread(SyncBus, nats_url, name="sync", timeout=1.0, trust_new=True)
        try:
            await asyncio.to_thread(sync.run, wait_for_chain(sync.bus, "tool.call", [f"{name}.ask"]))
            call = asyncio.create_task(
                asyncio.to_thread(sync.intercept, "tool.call", {"name": "shell"}, {"session": session})
            )
            store = AskStore(op.port)
            found: list[str] = []

            async def pending() -> bool:
                found[:] = [item.ask.id for item in await store.pending() if item.ask.session == session]
                return bool(found)

            await wait_until(pending, what="the ask")
            await asyncio.sleep(2.0)  # past the SyncBus's own timeout
            assert not call.done(), "the held call is still waiting for its answer"
            await store.answer(found[0], "deny", "alice", reason="held past the timeout")
            decision = await call
            assert isinstance(decision, Cancel) and decision.reason == "denied by alice: held past the timeout"
        finally:
            await asyncio.to_thread(sync.close)
