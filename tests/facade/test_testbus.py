"""TestBus beyond the shared contract (tests/facade/test_contract.py): its own promises and the docs' example."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import inspect
import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import BusClosedError, Cancel, Continue, Event, Module, Stage
from bus._core.errors import JournalError, PayloadRefError, RegistryError
from bus._core.subjects import PAYLOADS_BUCKET
from bus.testing import EventRecorder, TestBus
from bus.testing._broker import InProcessBroker
from subscribers.history._subjects import HISTORY_STREAM
from tests.support.waiting import barrier, wait_until, without_barriers

DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


async def test_the_example_in_docs_testing_runs() -> None:
    code, _ = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOCS), "exec"), namespace)
    tests = [
        value for name, value in namespace.items() if name.startswith("test_") and inspect.iscoroutinefunction(value)
    ]
    assert len(tests) == 3
    for test in tests:
        await test()


async def test_the_scripted_model_example_in_docs_testing_runs() -> None:
    _, code = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    namespace: dict[str, Any] = {}
    ran = eval(compile(code, str(DOCS), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), namespace)
    await ran  # the snippet awaits at top level: it starts the server and stops it
    assert namespace["llm"].url.startswith("http://127.0.0.1:")


def test_the_extra_docs_testing_names_brings_what_its_examples_need() -> None:
    [extra] = re.findall(r"pip install 'hookbus\[(\w+)\]'", DOCS.read_text())
    extras = tomllib.loads((DOCS.parent.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in extras[extra]}
    assert {"pytest", "pytest-asyncio"} <= names, f"hookbus[{extra}] brings {sorted(names)}"


async def test_flush_returns_once_subscribers_have_what_was_sent() -> None:
    async with TestBus() as bus:
        got: list[int] = []
        await bus.subscribe("eva.custom.count", lambda event: got.append(event.payload["n"]))
        for n in range(5):
            await bus.emit("eva.custom.count", {"n": n})
        await bus.flush()
        assert got == [0, 1, 2, 3, 4]


async def test_what_an_honest_emitter_never_sends_is_dropped_by_the_receive_checks() -> None:
    async with TestBus() as bus:
        recorder = EventRecorder()
        await bus.subscribe("eva.custom.raw", recorder)
        await bus.port.publish_raw("eva.custom.raw", b"not json")
        await bus.port.publish_raw("eva.custom.raw", b'{"event":"custom.raw","payload":{},"depth":99}')
        await barrier(bus, "eva.custom.raw", recorder)
        assert without_barriers(recorder.events) == []
        assert sum(bus.stats.dropped.values()) == 2


async def test_buses_on_one_broker_share_events() -> None:
    broker = InProcessBroker()
    async with TestBus(broker=broker) as sender, TestBus(broker=broker) as receiver:
        recorder = EventRecorder()
        await receiver.subscribe("eva.>", recorder)
        await sender.emit("eva.custom.hello", {"to": "you"})
        [event] = await recorder.wait_for(1)
        assert event.payload == {"to": "you"}


async def test_a_fail_closed_handler_that_times_out_cancels() -> None:
    module = Module("slow")
    release = asyncio.Event()

    @module.stage(Stage.TOOL_CALL, fail_closed=True, timeout=0.2)
    async def check(stage: str, payload: dict[str, Any]) -> Continue:
        await release.wait()  # never set: the handler's timeout ends it
        return Continue()

    async with TestBus(modules=[module]) as bus:
        decision = await bus.intercept(Stage.TOOL_CALL, {"name": "ls"})
        assert isinstance(decision, Cancel) and decision.handler == "slow.check"


async def test_without_trust_new_a_module_waits_for_approval() -> None:
    module = Module("unapproved")
    calls: list[str] = []

    @module.stage(Stage.TOOL_CALL)
    async def note(stage: str, payload: dict[str, Any]) -> Continue:
        calls.append(payload["name"])
        return Continue()

    async with TestBus(trust_new=False) as bus:
        await bus.serve(module)
        assert await bus.intercept(Stage.TOOL_CALL, {"name": "ls"}) == Continue()
        assert calls == []  # announced, not approved: never called
    async with TestBus(trust_new=False, managed=["unapproved.note"], modules=[module]) as bus:
        assert await bus.intercept(Stage.TOOL_CALL, {"name": "ls"}) == Continue()
        assert calls == ["ls"]


async def test_a_closed_test_bus_refuses_to_emit() -> None:
    bus = TestBus()
    async with bus:
        pass
    with pytest.raises(BusClosedError):
        await bus.emit("eva.custom.late", {})


async def test_a_subscription_over_its_pending_limit_drops_as_a_slow_consumer() -> None:
    release = asyncio.Event()
    got: list[int] = []

    async def slow(event: Event) -> None:
        await release.wait()
        got.append(event.payload["n"])

    async with TestBus() as bus:
        sub = await bus.subscribe("eva.custom.slow", slow, concurrency=1, pending_msgs=2)
        for n in range(5):  # routed at once; one handler runs, the subscription holds two
            await bus.emit("eva.custom.slow", {"n": n})
        await wait_until(lambda: bus.stats.dropped["slow_consumer"] == 2, what="two slow-consumer drops")
        assert sub.in_flight == 1 and sub.waiting == 2
        release.set()
        await wait_until(lambda: len(got) == 3, what="the running and the two held events")
        assert got == [0, 1, 2]


async def test_without_an_object_store_oversized_events_are_cut_and_references_refused() -> None:
    """The in-process broker keeps no JetStream: a 1 MiB payload is cut to fit, as on a server without the bucket."""
    async with TestBus() as bus:
        recorder = EventRecorder()
        await bus.subscribe("eva.custom.>", recorder)
        await bus.emit("eva.custom.big", {"output": "x" * (1024 * 1024)})
        [cut] = await recorder.wait_for(1)
        assert cut.truncated and cut.payload_ref is None and len(cut.payload["output"]) >= 60 * 1024
        assert bus.stats.truncated == 1 and bus.stats.claimed == 0

        body = b'{"whole":true}'
        digest = hashlib.sha256(body).hexdigest()
        ref: dict[str, Any] = {"bucket": PAYLOADS_BUCKET, "name": digest, "size": len(body), "sha256": digest}
        for bad, reason in (
            (ref, r"could not read object [0-9a-f]+ of hookbus_payloads: the in-process broker keeps no object store"),
            ({**ref, "bucket": "hookbus_modules"}, r"bucket 'hookbus_modules' refused"),
        ):
            envelope: dict[str, Any] = {"event": "custom.claimed", "timestamp": "2026-01-01T00:00:00.000Z"}
            envelope |= {"session_id": None, "payload": {}, "id": "claimed", "depth": 0, "truncated": True}
            envelope["payload_ref"] = bad
            await bus.port.publish_raw("eva.custom.claimed", orjson.dumps(envelope))
            [*_, claimed] = await recorder.wait_for(len(recorder.events) + 1)
            assert claimed.payload_ref is not None and claimed.payload_ref.bucket == bad["bucket"]
            with pytest.raises(PayloadRefError, match=reason):
                await claimed.full_payload()

        with pytest.raises(RegistryError, match="cannot create the hookbus_payloads bucket: the in-process broker"):
            await bus.port.ensure_payloads_bucket()
        with pytest.raises(JournalError, match=f"cannot read stream {HISTORY_STREAM}: the in-process broker"):
            [message async for message in bus.port.read_since(HISTORY_STREAM, datetime.now(UTC))]
