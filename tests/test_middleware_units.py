"""Middleware pieces without a server: chain order, module sub-chains, wire parsing, drain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bus import Cancel, Continue, DecisionError, Module, Patch, ToolResult
from bus.core.decisions import from_wire
from bus.core.declaration import declare
from bus.core.errors import BrokenChain
from bus.middleware.kernel.chain import order
from bus.middleware.kernel.drain import Drain


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
    unknown = await mod.handle({"stage": "tool.result", "payload": {}, "handlers": ["nope"]})
    assert unknown["reactions"][0]["outcome"] == "absent"


def test_from_wire_names_what_is_wrong() -> None:
    assert from_wire({"decision": "continue"}, "x") == Continue()
    assert from_wire({"decision": "cancel", "reason": "r"}, "x") == Cancel("r")
    assert from_wire({"decision": "patch", "payload": {"a": 1}}, "x") == Patch({"a": 1})
    for bad in ({"decision": "cancel"}, {"decision": "patch", "payload": []}, {"decision": "maybe"}, [], "x"):
        with pytest.raises(DecisionError):
            from_wire(bad, "x")


def test_drain_keeps_small_and_stores_large(tmp_path: Path) -> None:
    drain = Drain(tmp_path, budget=256)
    assert drain.text("short", "a") == "short"
    assert drain.payload({"k": "v"}, "b") == {"k": "v"}
    cut = drain.text("h" * 1000 + "t" * 1000, "c")
    [stored] = tmp_path.iterdir()
    assert str(stored) in cut and cut.startswith("hhh") and cut.endswith("ttt")
    assert stored.read_text() == "h" * 1000 + "t" * 1000
