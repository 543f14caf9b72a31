"""The bag as agent_os writes it, against a real server: ports ``{from, default, required}``, outputs a handler
returns, the standard keys' built-in fallbacks, and a bag per agent run (process) or, as chosen, per session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bus import Bus, Continue, MiddlewareOptions, Module, Patch, StageCtx
from bus._core.declaration import declare, from_wire
from bus._core.errors import DeclarationError
from bus.testing import serving, wait_for_chain
from tests.conftest import unique

PORTS = {
    "query": {"from": "retrieval.query", "default": None, "required": False},
    "model": {"from": "model.route"},
    "label": {"from": "intent.label", "default": "none"},
    "lang": "lang.user",
}


def test_ports_by_from_are_read_by_their_port_and_keep_the_key_on_the_wire() -> None:
    decl = declare("m", "h", "custom.x", inputs=PORTS)
    assert [(i.key, i.name, i.default) for i in decl.inputs] == [
        ("intent.label", "label", "none"), ("lang.user", "lang", None),
        ("model.route", "model", None), ("retrieval.query", "query", None),
    ]  # fmt: skip
    assert from_wire(decl.to_wire()) == decl
    plain = declare("m", "h", "custom.x", inputs=[{"key": "lang.user", "default": "en"}])
    assert "port" not in plain.to_wire()["inputs"][0]  # no port named: the identity an operator approved stands
    assert declare("m", "h", "custom.x", inputs={"mine": {}}).inputs[0].key == "h.mine"  # <hook>.<port>
    with pytest.raises(DeclarationError, match="once"):
        declare("m", "h", "custom.x", inputs=[{"key": "a.b", "from": "a.b"}])
    with pytest.raises(DeclarationError, match="same port"):
        declare("m", "h", "custom.x", inputs=[{"key": "a.b", "port": "p"}, {"key": "c.d", "port": "p"}])


async def test_a_returned_output_feeds_a_port_and_fallbacks_fill_the_rest(kernel: Bus, nats_url: str) -> None:
    stage = f"custom.{unique('r')}"
    producer, consumer = Module(unique("prod")), Module(unique("cons"))
    seen: list[dict[str, Any]] = []

    @consumer.stage(stage, inputs=PORTS)
    async def answer(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Patch:
        seen.append(dict(ctx.inputs))
        return Patch({**payload, "asked": ctx.inputs["query"]})

    @producer.stage(stage, outputs=["retrieval.query"])
    async def condense(stage: str, payload: dict[str, Any]) -> Continue:
        if payload.get("rewrite"):
            return Continue(outputs={"retrieval.query": "condensed", "not.declared": "dropped"})
        return Continue()

    async with serving(consumer, nats_url), serving(producer, nats_url):
        await wait_for_chain(kernel, stage, [f"{producer.name}.condense", f"{consumer.name}.answer"])
        first = await kernel.intercept(stage, {"text": "the raw words", "model": "m-small"}, {"session": "s1"})
        assert first == Patch({"text": "the raw words", "model": "m-small", "asked": "the raw words"})
        second = await kernel.intercept(stage, {"text": "raw", "rewrite": True}, {"session": "s2"})
        assert second == Patch({"text": "raw", "rewrite": True, "asked": "condensed"})
    # the bag's value, else the literal default, else the key's built-in fallback (else nothing)
    assert seen == [
        {"query": "the raw words", "model": "m-small", "label": "none", "lang": None},
        {"query": "condensed", "model": None, "label": "none", "lang": None},
    ]
    assert kernel.middleware.bags.of("s2") == {"retrieval.query": "condensed"}


@pytest.fixture
async def by_session(nats_url: str) -> AsyncIterator[Bus]:
    async with Bus(nats_url, name="kernel", trust_new=True, middleware=MiddlewareOptions(bag_scope="session")) as bus:
        await bus.middleware.start()
        yield bus


async def _runs(kernel: Bus, nats_url: str) -> list[Any]:
    """Process a writes its words on user.message; what processes a and b read later, in the same session."""
    later = f"custom.{unique('l')}"
    mod = Module(unique("scope"))
    read: list[Any] = []

    @mod.stage("user.message", outputs="lang.user", match=None)
    async def note(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        return Continue(outputs={"lang.user": payload["text"]}) if payload.get("text") else Continue()

    @mod.stage(later, inputs={"said": {"from": "lang.user"}})
    async def use(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        read.append(ctx.inputs["said"])
        return Continue()

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "user.message", [f"{mod.name}.note"])
        await wait_for_chain(kernel, later, [f"{mod.name}.use"])
        await kernel.intercept("user.message", {"text": "hello"}, {"session": "s", "process": "a"})
        await kernel.intercept(later, {}, {"session": "s", "process": "a"})
        await kernel.intercept(later, {}, {"session": "s", "process": "b"})
        await kernel.intercept("user.message", {}, {"session": "s", "process": "a"})  # a's next message: a new bag
        await kernel.intercept(later, {}, {"session": "s", "process": "a"})
    return read


async def test_a_bag_belongs_to_one_agent_run(kernel: Bus, nats_url: str) -> None:
    assert await _runs(kernel, nats_url) == ["hello", None, None]  # b, another process, never sees a's bag


async def test_the_session_scope_shares_a_bag_between_processes(by_session: Bus, nats_url: str) -> None:
    assert await _runs(by_session, nats_url) == ["hello", "hello", None]
