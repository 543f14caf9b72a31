"""Trust and approvals (through the real CLI), broken chains, replicas, drain, tool.result, shutdown clamp."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Continue, MiddlewareOptions, Module, Patch, Stage, TrustState
from bus._core.declaration import declare
from bus._core.errors import ConfigError
from bus.testing import EventRecorder, JournalRecorder, serving, wait_for_chain
from tests.conftest import run_cli, unique
from tests.support.mwproc import module_process


async def cli(nats_url: str, *args: str) -> str:
    done = await asyncio.to_thread(run_cli, *args, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    return done.stdout


def guard(name: str, stage: str, reordered: bool = False) -> Module:
    """A guard; ``reordered``: the same code, now declared to run after a new handler."""
    mod = Module(name)
    if reordered:

        @mod.stage(stage)
        async def first(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()

    @mod.stage(stage, after=["first"] if reordered else [])
    async def deny(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("guarded")

    return mod


async def wait_declared(bus: Bus, qualname: str, state: TrustState) -> None:
    view = await bus.middleware.start()

    def seen() -> bool:
        found = view.declarations().get(qualname)
        return found is not None and view.trust_of(found[0]) is state

    await view.wait_until(seen, 10)


def test_identity_is_of_the_normalised_declaration() -> None:
    one = declare("m", "h", Stage.TOOL_CALL, match="write_file|apply_patch", before="x", timeout=2)
    two = declare("m", "h", "tool.call", match=["apply_patch", "write_file"], before=["m.x"], timeout=2.0)
    assert one.identity() == two.identity()
    assert declare("m", "h", "tool.call", after="x").identity() != declare("m", "h", "tool.call").identity()


async def test_new_and_modified_handlers_wait_for_approval(nats_url: str) -> None:
    name, stage = unique("trust"), f"custom.{unique('t')}"
    qualname = f"{name}.deny"
    async with Bus(nats_url, name="strict-kernel") as kernel:
        journal = await JournalRecorder().attach(kernel)
        async with serving(guard(name, stage), nats_url):
            await wait_declared(kernel, qualname, TrustState.UNTRUSTED)
            assert await kernel.intercept(stage, {}) == Continue()  # not executed before approval
            [entry] = await journal.wait_for(1)
            assert entry.decision == "denied"
            assert entry.cause == "untrusted: not approved"
            assert qualname in await cli(nats_url, "approvals")
            assert f"approved {qualname}" in await cli(nats_url, "approve", qualname)
            await wait_for_chain(kernel, stage, [qualname])
            assert isinstance(await kernel.intercept(stage, {}), Cancel)
        async with serving(guard(name, stage, reordered=True), nats_url):  # only its ordering changed
            await wait_declared(kernel, qualname, TrustState.MODIFIED)
            assert await kernel.intercept(stage, {}) == Continue()
            listing = await cli(nats_url, "approvals")
            assert f"{qualname}  modified" in listing
            chain = await cli(nats_url, "chain", stage)
            assert "modified" in chain and "fail-open" in chain
            await cli(nats_url, "approve", name)  # the module: both its waiting handlers
            await wait_for_chain(kernel, stage, [f"{name}.first", qualname])
            assert isinstance(await kernel.intercept(stage, {}), Cancel)


async def test_managed_handlers_need_no_approval(nats_url: str) -> None:
    name, stage = unique("managed"), f"custom.{unique('m')}"
    async with Bus(nats_url, managed=[f"{name}.deny"]) as kernel, serving(guard(name, stage), nats_url):
        await wait_for_chain(kernel, stage, [f"{name}.deny"])
        assert isinstance(await kernel.intercept(stage, {}), Cancel)


async def test_cli_intercept_and_chain(kernel: Bus, nats_url: str) -> None:
    name, stage = unique("cli"), f"custom.{unique('c')}"
    async with serving(guard(name, stage), nats_url):
        await wait_for_chain(kernel, stage, [f"{name}.deny"])
        out = await cli(nats_url, "intercept", stage, '{"a": 1}')
        assert orjson.loads(out) == {"decision": "cancel", "reason": "guarded", "handler": f"{name}.deny"}
        assert "1. " + f"{name}.deny  trusted  fail-open" in await cli(nats_url, "chain")


async def test_cycle_disables_the_chain_until_fixed(kernel: Bus, nats_url: str) -> None:
    name, stage = unique("cyc"), f"custom.{unique('cy')}"
    events = EventRecorder(lambda event: event.payload.get("stage") == stage)
    await kernel.subscribe("eva.broken.*", events)
    await kernel.flush()
    mod = Module(name)

    @mod.stage(stage, before="b")
    async def a(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("a ran")

    @mod.stage(stage, before="a")
    async def b(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("b ran")

    async with serving(mod, nats_url):
        [broken] = await events.wait_for(1)
        assert broken.subject == "eva.broken.set" and "cycle" in broken.payload["reason"]
        assert await kernel.intercept(stage, {}) == Continue()  # calls go past a broken chain
    cleared = (await events.wait_for(2))[1]
    assert cleared.subject == "eva.broken.cleared"


async def test_dangling_reference_disables_the_chain_until_fixed(kernel: Bus, nats_url: str) -> None:
    first, second, stage = unique("x"), unique("y"), f"custom.{unique('br')}"
    events = EventRecorder(lambda event: event.payload.get("stage") == stage)
    await kernel.subscribe("eva.broken.*", events)
    await kernel.flush()
    one, two = Module(first), Module(second)

    @one.stage(stage)
    async def a(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("a ran")

    @two.stage(stage, before=f"{first}.nothing")
    async def b(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("b ran")

    async with serving(one, nats_url):
        await wait_for_chain(kernel, stage, [f"{first}.a"])
        async with serving(two, nats_url):
            [broken] = await events.wait_for(1)
            assert broken.subject == "eva.broken.set"
            assert f"refers to {first}.nothing" in broken.payload["reason"]
            assert await kernel.intercept(stage, {}) == Continue()
        cleared = (await events.wait_for(2))[1]
        assert cleared.subject == "eva.broken.cleared"
        await wait_for_chain(kernel, stage, [f"{first}.a"])
        assert await kernel.intercept(stage, {}) == Cancel("a ran", f"{first}.a")


async def test_two_replicas_share_the_load(kernel: Bus, nats_url: str) -> None:
    name, stage = unique("rep"), f"custom.{unique('r')}"
    with (
        module_process(nats_url, name, stage, "--behaviour", "count") as one,
        module_process(nats_url, name, stage, "--behaviour", "count") as two,
    ):
        await wait_for_chain(kernel, stage, [f"{name}.h"])
        view = await kernel.middleware.start()
        await view.wait_until(lambda: sum(ann.module == name for ann, _ in view.instances.values()) == 2, 10)
        decisions = await asyncio.gather(*(kernel.intercept(stage, {"i": i}) for i in range(40)))
        served = {d.payload["served_by"] for d in decisions if isinstance(d, Patch)}
        assert served == {one.pid, two.pid}


async def test_output_drain(nats_url: str, tmp_path: Path) -> None:
    name, stage = unique("chatty"), f"custom.{unique('d')}"
    mod = Module(name)
    big = "x" * 5000 + "MIDDLE" + "y" * 5000

    @mod.stage(stage)
    async def talk(stage: str, payload: dict[str, Any]) -> Cancel | Patch:
        return Cancel(big) if payload.get("cancel") else Patch({"output": big})

    options = MiddlewareOptions(drain_dir=tmp_path, drain_budget=1024)
    async with Bus(nats_url, trust_new=True, middleware=options) as kernel, serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{name}.talk"])
        cancel = await kernel.intercept(stage, {"cancel": True})
        assert isinstance(cancel, Cancel)
        assert len(cancel.reason) < 1024 and cancel.reason.startswith("xxx") and cancel.reason.endswith("yyy")
        patch = await kernel.intercept(stage, {})
        assert isinstance(patch, Patch)
        assert len(orjson.dumps(patch.payload)) < 1024
    [text] = [path for path in tmp_path.iterdir() if path.suffix == ".txt"]
    [whole] = [path for path in tmp_path.iterdir() if path.suffix == ".json"]
    assert str(text) in cancel.reason and text.read_text() == big
    assert str(whole) in patch.payload["output"] and orjson.loads(whole.read_bytes()) == {"output": big}


async def test_tool_result_cancel_hides_and_remark_wraps(kernel: Bus, nats_url: str) -> None:
    name = unique("res")
    mod = Module(name)

    @mod.stage(Stage.TOOL_RESULT)
    async def review(stage: str, payload: dict[str, Any]) -> Cancel | Patch:
        if "password" in payload["output"]:
            return Cancel("contains a secret")
        return Patch({**payload, "remark": "looks truncated"})

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, "tool.result", [f"{name}.review"])
        hidden = await kernel.intercept("tool.result", {"name": "shell", "output": "password=hunter2"})
        assert isinstance(hidden, Cancel) and hidden.payload is not None
        assert "hunter2" not in hidden.payload["output"] and "contains a secret" in hidden.payload["output"]
        wrapped = await kernel.intercept("tool.result", {"name": "shell", "output": "line 1"})
        assert isinstance(wrapped, Patch)
        assert wrapped.payload["output"].startswith("line 1")
        assert "looks truncated" in wrapped.payload["output"] and "remark" not in wrapped.payload


async def test_shutdown_is_clamped(nats_url: str) -> None:
    name, stage = unique("hang"), f"custom.{unique('h')}"
    mod = Module(name)
    entered, release = asyncio.Event(), asyncio.Event()

    @mod.stage(stage, timeout=30, fail_closed=True)
    async def stuck(stage: str, payload: dict[str, Any]) -> Continue:
        entered.set()
        await release.wait()
        return Continue()

    options = MiddlewareOptions(shutdown_clamp=0.2)
    async with serving(mod, nats_url):
        kernel = await Bus(nats_url, trust_new=True, middleware=options).start()
        journal = await JournalRecorder().attach(kernel)
        await wait_for_chain(kernel, stage, [f"{name}.stuck"])
        pending = asyncio.ensure_future(kernel.intercept(stage, {}))
        await asyncio.wait_for(entered.wait(), 10)  # the call is in flight: the handler has it
        closing = asyncio.ensure_future(kernel.close())
        decision = await asyncio.wait_for(pending, 10)  # returns although the handler still hangs
        await asyncio.wait_for(closing, 10)
        release.set()
        assert isinstance(decision, Cancel) and "shutdown" in decision.reason
        assert not journal.entries or journal.entries[0].decision == "shutdown"


def test_managed_names_handlers_exactly() -> None:
    """A whole module is not managed: that would trust whatever its credentials announce."""
    with pytest.raises(ConfigError, match=r"managed handler 'guard' is not module\.handler"):
        Bus("nats://127.0.0.1:1", managed=["guard"])
    with pytest.raises(ConfigError, match=r"is not module\.handler"):
        Bus("nats://127.0.0.1:1", managed=["guard.no rm"])
    assert Bus("nats://127.0.0.1:1", managed=["guard.no_rm"]).middleware is not None
