"""Middleware pieces without a server: chain order, module sub-chains, wire parsing, drain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Cancel, Continue, DecisionError, Module, Patch, ToolResult
from bus._core.decisions import from_wire, read_reply, reply_of
from bus._core.declaration import declare
from bus._core.errors import BrokenChain
from bus._core.middleware_schema import MiddlewareRequest, ReactionMsg
from bus._core.schema import encode
from bus._middleware.kernel.chain import order
from bus._middleware.kernel.drain import Drain
from bus.testing import TestBus


def test_order_follows_references_then_names() -> None:
    decls = [
        declare("z", "last", "s", after="a.first"),
        declare("a", "first", "s"),
        declare("m", "free", "s"),
        declare("b", "middle", "s", after="a.first", before="z.last"),
    ]
    assert [d.qualname for d in order("s", decls)] == ["a.first", "b.middle", "m.free", "z.last"]


def test_order_rejects_cycles_self_and_dangling() -> None:
    with pytest.raises(BrokenChain, match="cycle"):
        order("s", [declare("a", "x", "s", before="b.y"), declare("b", "y", "s", before="a.x")])
    with pytest.raises(BrokenChain, match="itself"):
        order("s", [declare("a", "x", "s", before="x")])
    with pytest.raises(BrokenChain, match="not declared"):
        order("s", [declare("a", "x", "s", after="gone")])


async def test_module_handle_runs_its_sub_chain_without_nats() -> None:
    mod = Module("local")

    @mod.stage("tool.result")
    async def note(stage: str, result: ToolResult) -> Patch:
        return Patch({**result.rest, "name": result.name, "output": result.output, "remark": "check"})

    @mod.stage("tool.result")
    async def broken(stage: str, payload: dict[str, Any]) -> Any:
        return 42

    reply = await mod.handle({"stage": "tool.result", "payload": {"name": "ls", "output": "a", "id": 7}})
    assert reply["decision"] == "patch"
    assert reply["payload"]["id"] == 7
    assert reply["payload"]["output"].startswith("a\n\n[hookbus: remark from local.note]")
    assert [r["outcome"] for r in reply["reactions"]] == ["ok", "invalid"]
    unknown = await mod.answer(MiddlewareRequest(stage="tool.result", handlers=["nope", "note"]))
    assert isinstance(unknown.reactions, list)
    assert [(r.handler, r.outcome, r.cause) for r in unknown.reactions] == [
        ("local.nope", "absent", "not declared here"),
        ("local.note", "ok", None),
    ]
    with pytest.raises(ValueError, match=r"^request: field 'ctx.depth': expected `int` <= 7"):
        await mod.handle({"stage": "tool.result", "ctx": {"depth": 8}})


async def test_module_handle_stops_at_a_cancel_and_names_its_handler() -> None:
    mod = Module("local")  # llm.request: a cancel ends the chain (on tool.call a later result may beat it)

    @mod.stage("llm.request")
    async def first(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "seen": 1})

    @mod.stage("llm.request")
    async def veto(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel(f"no after {payload['seen']}")

    @mod.stage("llm.request")
    async def never(stage: str, payload: dict[str, Any]) -> Continue:
        raise AssertionError("a cancel ends the run")

    reply = await mod.answer(MiddlewareRequest(stage="llm.request", payload={"name": "x"}))
    assert (reply.decision, reply.reason, reply.handler) == ("cancel", "no after 1", "local.veto")
    wire = orjson.loads(encode(reply))
    assert [r["handler"] for r in wire["reactions"]] == ["local.first", "local.veto"]
    assert wire["reactions"][1]["reason"] == "no after 1" and "reason" not in wire["reactions"][0]
    assert "payload" not in wire and "error" not in wire


def test_from_wire_names_what_is_wrong() -> None:
    assert from_wire({"decision": "continue"}, "x") == Continue()
    assert from_wire({"decision": "cancel", "reason": "r"}, "x") == Cancel("r")
    assert from_wire({"decision": "patch", "payload": {"a": 1}}, "x") == Patch({"a": 1})
    for bad in ({"decision": "cancel"}, {"decision": "patch", "payload": []}, {"decision": "maybe"}, [], "x"):
        with pytest.raises(DecisionError):
            from_wire(bad, "x")


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"nope", "reply is not JSON"),
        (b"[]", "reply must be a JSON object, not array"),
        (b'{"decision": "maybe"}', "reply: field 'decision': invalid enum value 'maybe'"),
        (b'{"decision": "patch", "payload": []}', "reply: field 'payload': expected `object`, got `array`"),
        (b'{"decision": "cancel"}', "cancel without a string 'reason'"),
        (b'{"error": "malformed request: x"}', "the module answered an error: malformed request: x"),
        (
            b'{"decision": "continue", "reactions": [{"handler": "m.h", "outcome": "ok", "duration_ms": -1}]}',
            "reply: field 'reactions[0].duration_ms': expected `float` >= 0.0",
        ),
        (b'{"decision": "continue", "reactions": [{"outcome": "ok"}]}', "field 'reactions[0].handler' is required"),
    ],
)
def test_a_bad_reply_is_refused_naming_the_subject_and_the_field(reply: bytes, message: str) -> None:
    with pytest.raises(DecisionError) as caught:
        read_reply(reply, "hookbus.mw.m.v1")
    assert str(caught.value).startswith("invalid decision from hookbus.mw.m.v1: ")
    assert message in str(caught.value)


def test_a_decision_is_written_as_the_schema_says() -> None:
    reactions = [ReactionMsg(handler="m.h", outcome="ok", decision="cancel", reason="r", duration_ms=1.0)]
    wire = orjson.loads(encode(reply_of(Cancel("r", "m.h"), reactions)))
    assert wire == {
        "decision": "cancel",
        "reason": "r",
        "handler": "m.h",
        "reactions": [
            {"handler": "m.h", "outcome": "ok", "decision": "cancel", "reason": "r", "duration_ms": 1.0, "cause": None}
        ],
    }
    assert Continue().to_wire() == {"decision": "continue"}
    assert Patch({"a": 1}).to_wire() == {"decision": "patch", "payload": {"a": 1}}
    assert read_reply(encode(reply_of(Patch({"a": [1]}), [])), "x")[1] == Patch({"a": [1]})


def test_drain_keeps_small_and_stores_large(tmp_path: Path) -> None:
    drain = Drain(tmp_path, budget=256)
    assert drain.text("short", "a") == "short"
    assert drain.payload({"k": "v"}, "b") == {"k": "v"}
    cut = drain.text("h" * 1000 + "t" * 1000, "c")
    [stored] = tmp_path.iterdir()
    assert str(stored) in cut and cut.startswith("hhh") and cut.endswith("ttt")
    assert stored.read_text() == "h" * 1000 + "t" * 1000


async def test_a_patch_json_cannot_carry_is_answered_as_an_error_and_read_per_the_fail_mode() -> None:
    mod = Module("odd")

    @mod.stage("custom.odd", fail_closed=True)
    async def keeps_an_object(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "thing": object()})

    async with TestBus(modules=[mod]) as bus:
        decision = await bus.intercept("custom.odd", {"name": "x"})
    assert isinstance(decision, Cancel) and decision.handler == "odd.keeps_an_object"
    assert "the module answered an error: the reply cannot be encoded" in decision.reason
