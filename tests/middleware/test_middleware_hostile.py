"""Hostile or odd module replies never escape ``intercept`` as exceptions; a module's cap holds at every depth.

The replies come from a real responder on the request subject of an announced
module, through a real nats-server; hypothesis picks them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import nats
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg

from bus import Bus, Cancel, Continue, Decision, MiddlewareOptions, Module, Patch
from bus._core.declaration import declare
from bus._middleware.handler.serving import ModuleServer
from bus._middleware.registry import MODULES_BUCKET, Announcement, open_bucket, request_subject, version_of
from bus._transport.publisher import ordered_flush
from bus.testing import wait_for_chain
from tests.conftest import unique

T = TypeVar("T")
#: Bound on starting the harness (a kernel, two announced modules, their chains seen): generous, since
#: on a loaded 2-core CI machine it took longer than the 30 s a single call is given.
START_TIMEOUT = 120.0


class Harness:
    """A kernel and two announced modules (fail-open, fail-closed) answering whatever ``reply`` holds."""

    def __init__(self, url: str, drain_dir: Path) -> None:
        self.url = url
        self.drain_dir = drain_dir
        self.reply = b"{}"
        self.stage = f"custom.{unique('hostile')}"
        self.names = {False: unique("open"), True: unique("closed")}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self._start(), timeout=START_TIMEOUT)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stage_of(self, fail_closed: bool) -> str:
        return f"{self.stage}.{'closed' if fail_closed else 'open'}"

    def qualnames(self, fail_closed: bool) -> list[str]:
        return [f"{self.names[fail_closed]}.{h}" for h in ("one", "two")]

    async def _start(self) -> None:
        options = MiddlewareOptions(drain_dir=self.drain_dir, drain_budget=4096)
        self.kernel = await Bus(self.url, trust_new=True, middleware=options).start()
        kv = await open_bucket(self.kernel.port, MODULES_BUCKET)
        for fail_closed, name in self.names.items():
            stage = self.stage_of(fail_closed)
            decls = tuple(declare(name, h, stage, fail_closed=fail_closed, timeout=1.0) for h in ("one", "two"))
            ann = Announcement(name, "hostile", f"hookbus.mw.{name}", 30.0, True, decls)
            await self.kernel.port.nc.subscribe(request_subject(ann), cb=self._answer)
            await kv.put(ann.key, ann.to_bytes())
            await wait_for_chain(self.kernel, stage, self.qualnames(fail_closed), timeout=START_TIMEOUT / 2)

    async def _answer(self, msg: Msg) -> None:
        await msg.respond(self.reply)

    def call(self, fail_closed: bool, reply: bytes) -> Decision:
        self.reply = reply
        return self.run(self.kernel.intercept(self.stage_of(fail_closed), {"name": "shell"}))

    def close(self) -> None:
        self.run(self.kernel.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def harness(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    made = Harness(nats_url, tmp_path_factory.mktemp("drain"))
    try:
        yield made
    finally:
        made.close()


def is_decision(value: object) -> bool:
    return isinstance(value, Continue | Cancel | Patch)


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=50),
)
json_value = st.recursive(
    json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
)
odd_text = st.one_of(
    st.text(max_size=400),
    st.integers(min_value=0, max_value=40_000).map(lambda n: "r" * n),
    st.just("../../etc/passwd"),
    st.just("h" * 300),
)
reaction = st.fixed_dictionaries(
    {},
    optional={
        "handler": st.one_of(odd_text, json_value),
        "outcome": st.one_of(
            st.sampled_from(["ok", "absent", "failed", "timeout", "invalid", "oversize", "x"]), json_value
        ),
        "decision": st.one_of(st.sampled_from(["continue", "cancel", "patch", "maybe"]), json_value),
        "reason": st.one_of(odd_text, json_value),
        "cause": st.one_of(odd_text, json_value),
        "duration_ms": json_value,
    },
)
structured = st.fixed_dictionaries(
    {"decision": st.one_of(st.sampled_from(["continue", "cancel", "patch"]), json_value)},
    optional={
        "reason": st.one_of(odd_text, json_value),
        "handler": st.one_of(odd_text, json_value),
        "payload": st.one_of(st.dictionaries(st.text(max_size=8), json_value, max_size=3), json_value),
        "reactions": st.one_of(st.lists(reaction, max_size=4), json_value),
    },
).map(orjson.dumps)
replies = st.one_of(structured, st.binary(max_size=300), json_value.map(orjson.dumps))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=replies, fail_closed=st.booleans())
def test_hostile_replies_never_raise(harness: Harness, reply: bytes, fail_closed: bool) -> None:
    decision = harness.call(fail_closed, reply)
    assert is_decision(decision)
    if isinstance(decision, Cancel):
        assert decision.handler in harness.qualnames(fail_closed)  # the kernel's own name, whatever was claimed
    try:
        parsed = orjson.loads(reply)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) and fail_closed:
        assert isinstance(decision, Cancel)  # not a decision: the declared fail mode
    if not isinstance(parsed, dict) and not fail_closed:
        assert decision == Continue()


def test_a_fault_reads_through_the_declared_fail_mode(harness: Harness) -> None:
    first, _ = harness.qualnames(True)
    said_continue = {
        "decision": "continue",
        "reactions": [{"handler": first, "outcome": "failed", "decision": "continue", "cause": "raised"}],
    }
    decision = harness.call(True, orjson.dumps(said_continue))
    assert decision == Cancel(f"{first} is fail-closed and failed: raised", first)
    unknown = {
        "decision": "continue",
        "reactions": [{"handler": first, "outcome": "absent", "cause": "not declared here"}],
    }
    decision = harness.call(True, orjson.dumps(unknown))
    assert isinstance(decision, Cancel) and "fail-closed and absent" in decision.reason
    silent = {
        "decision": "continue",
        "reactions": [{"handler": "someone.else", "outcome": "ok", "decision": "continue"}],
    }
    assert isinstance(harness.call(True, orjson.dumps(silent)), Cancel)  # it does not account for our handler
    assert harness.call(False, orjson.dumps(silent)) == Continue()


def test_a_reply_of_the_wrong_shape_is_invalid_as_a_whole_naming_the_field(harness: Harness) -> None:
    first, second = harness.qualnames(True)
    ok = {"handler": first, "outcome": "ok", "decision": "continue", "duration_ms": 0.1}
    reactions: list[dict[str, Any]] = [ok, {**ok, "handler": second, "duration_ms": "soon"}]
    reply = {"decision": "continue", "reactions": reactions}
    decision = harness.call(True, orjson.dumps(reply))
    assert isinstance(decision, Cancel) and decision.handler == first  # the whole request: the first one's fail mode
    assert f"{first} is fail-closed and invalid: invalid reply: " in decision.reason
    assert "field 'reactions[1].duration_ms'" in decision.reason
    assert harness.call(False, orjson.dumps(reply)) == Continue()
    reactions[1]["duration_ms"] = 0.2  # well-typed: both handlers passed
    assert harness.call(True, orjson.dumps(reply)) == Continue()
    said_error = harness.call(True, orjson.dumps({"error": "malformed request: x", "decision": "continue"}))
    assert isinstance(said_error, Cancel) and "the module answered an error: malformed request: x" in said_error.reason


def test_a_huge_reason_and_an_odd_handler_name_are_drained_under_the_kernels_name(harness: Harness) -> None:
    first, _ = harness.qualnames(False)
    reply = {"decision": "cancel", "reason": "x" * 16384 + "END", "handler": "h" * 300 + "/../../x"}
    decision = harness.call(False, orjson.dumps(reply))
    assert isinstance(decision, Cancel) and decision.handler == first
    assert decision.reason.endswith("END")
    [stored] = [path for path in harness.drain_dir.iterdir() if first in path.name]
    assert str(stored) in decision.reason and stored.read_text().endswith("END")
    assert harness.call(False, b'{"decision": "cancel", "reason": "\xff\xfe"}') == Continue()  # not UTF-8


async def test_the_concurrency_cap_holds_at_every_depth(nats_url: str) -> None:
    module = Module(unique("capped"), concurrency=4)
    running, most = 0, 0
    release = asyncio.Event()

    @module.stage("custom.capped")
    async def hold(stage: str, payload: dict[str, Any]) -> Continue:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1
        return Continue()

    nc = await nats.connect(nats_url)
    async with Bus(nats_url) as bus:
        server = ModuleServer(module, bus)
        ready = asyncio.Event()
        task = asyncio.ensure_future(server.run(ready))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            subject = f"hookbus.mw.{module.name}.{version_of(module.declarations)}"
            sent = 200
            for n in range(sent):
                ctx = {"depth": n % 8, "id": str(n)}
                await nc.publish(subject, orjson.dumps({"stage": "custom.capped", "payload": {}, "ctx": ctx}))
            await ordered_flush(nc, 5)
            async with asyncio.timeout(10):  # every request taken in: running, or waiting in a queue
                while running + len(server._waiting) + len(server._waiting_nested) < sent:
                    await asyncio.sleep(0.01)
            assert most == running == 8  # 4 for agents' calls, 4 more for nested ones, whatever depth they claim
            release.set()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await nc.close()
