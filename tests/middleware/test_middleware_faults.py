"""Every fault under fail-open and fail_closed: hang, raise, garbage, process killed, never started."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.msg import Msg

from bus import Bus, Cancel, Continue, Module, Patch
from bus._core.declaration import declare
from bus._middleware.registry import MODULES_BUCKET, Announcement, open_bucket, request_subject
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.conftest import unique
from tests.support.mwproc import module_process

FAIL_MODES = [pytest.param(False, id="fail-open"), pytest.param(True, id="fail-closed")]


def expect(decision: Any, fail_closed: bool, outcome: str) -> None:
    if fail_closed:
        assert isinstance(decision, Cancel), decision
        assert f"fail-closed and {outcome}" in decision.reason
    else:
        assert decision == Continue()


async def misbehave(stage: str, payload: dict[str, Any]) -> Any:
    kind = payload["kind"]
    if kind == "hang":
        await asyncio.sleep(60)  # the scenario: a handler that hangs past its timeout
    if kind == "raise":
        raise RuntimeError("handler bug")
    return "yes, sure"  # garbage: not a decision


@pytest.mark.parametrize("fail_closed", FAIL_MODES)
@pytest.mark.parametrize(("kind", "outcome"), [("hang", "timeout"), ("raise", "failed"), ("garbage", "invalid")])
async def test_in_process_faults(kernel: Bus, nats_url: str, fail_closed: bool, kind: str, outcome: str) -> None:
    mod, stage = Module(unique("faulty")), f"custom.{unique('fault')}"  # a gone fail-closed guard holds its stage
    mod.stage(stage, fail_closed=fail_closed, timeout=0.2)(misbehave)
    journal = await JournalRecorder().attach(kernel)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.misbehave"])
        expect(await kernel.intercept(stage, {"kind": kind}), fail_closed, outcome)
        [entry] = await journal.wait_for(1)
        assert entry.decision == outcome
        assert entry.cause is not None
        assert entry.cause.endswith("read as cancel (fail-closed)" if fail_closed else "read as continue (fail-open)")


def ghost(module: str, stage: str, fail_closed: bool) -> Announcement:
    decl = declare(module, "h", stage, fail_closed=fail_closed, timeout=0.5)
    return Announcement(module, "ghost", f"hookbus.mw.{module}", 30.0, True, (decl,))


async def announce_without_serving(kernel: Bus, module: str, stage: str, fail_closed: bool) -> None:
    """A registry entry for a module that never answers (declared, never started)."""
    ann = ghost(module, stage, fail_closed)
    kv = await open_bucket(kernel.port, MODULES_BUCKET)
    await kv.put(ann.key, ann.to_bytes())


@pytest.mark.parametrize("fail_closed", FAIL_MODES)
async def test_never_started(kernel: Bus, fail_closed: bool) -> None:
    name, stage = unique("ghost"), f"custom.{unique('g')}"
    journal = await JournalRecorder().attach(kernel)
    await announce_without_serving(kernel, name, stage, fail_closed)
    await wait_for_chain(kernel, stage, [f"{name}.h"])
    expect(await kernel.intercept(stage, {}), fail_closed, "absent")
    [entry] = await journal.wait_for(1)
    assert entry.decision == "absent"


@pytest.mark.parametrize("fail_closed", FAIL_MODES)
async def test_garbage_bytes_from_a_foreign_responder(kernel: Bus, fail_closed: bool) -> None:
    name, stage = unique("foreign"), f"custom.{unique('f')}"

    async def reply_garbage(msg: Msg) -> None:
        await msg.respond(b"\x00not json")

    await kernel.port.nc.subscribe(request_subject(ghost(name, stage, fail_closed)), cb=reply_garbage)
    await announce_without_serving(kernel, name, stage, fail_closed)
    await wait_for_chain(kernel, stage, [f"{name}.h"])
    expect(await kernel.intercept(stage, {}), fail_closed, "invalid")


@pytest.mark.parametrize("fail_closed", FAIL_MODES)
async def test_process_killed(kernel: Bus, nats_url: str, fail_closed: bool) -> None:
    name, stage = unique("victim"), f"custom.{unique('k')}"
    flags = ["--fail-closed"] if fail_closed else []
    # A long heartbeat: the kernel still lists the module after the kill, so the call meets no responders.
    with module_process(nats_url, name, stage, "--behaviour", "cancel", "--heartbeat", "30", *flags) as proc:
        await wait_for_chain(kernel, stage, [f"{name}.h"])
        assert isinstance(await kernel.intercept(stage, {}), Cancel)
        proc.kill()
        proc.wait(10)
        expect(await kernel.intercept(stage, {}), fail_closed, "absent")


async def test_dead_module_leaves_the_chain(kernel: Bus, nats_url: str) -> None:
    name, stage = unique("beat"), f"custom.{unique('b')}"
    with module_process(nats_url, name, stage, "--heartbeat", "0.2") as proc:
        await wait_for_chain(kernel, stage, [f"{name}.h"])
        proc.kill()
        proc.wait(10)
        await wait_for_chain(kernel, stage, [], timeout=10)  # dropped after missed heartbeats
    assert await kernel.intercept(stage, {}) == Continue()


@pytest.mark.parametrize("fail_closed", FAIL_MODES)
async def test_silent_responder_times_out(kernel: Bus, fail_closed: bool) -> None:
    name, stage = unique("silent"), f"custom.{unique('q')}"

    async def say_nothing(msg: Msg) -> None:
        return None

    await kernel.port.nc.subscribe(request_subject(ghost(name, stage, fail_closed)), cb=say_nothing)
    await announce_without_serving(kernel, name, stage, fail_closed)  # handler timeout 0.5 s
    await wait_for_chain(kernel, stage, [f"{name}.h"])
    journal = await JournalRecorder().attach(kernel)
    expect(await kernel.intercept(stage, {}), fail_closed, "timeout")
    [entry] = await journal.wait_for(1)
    assert entry.decision == "timeout"


@pytest.mark.parametrize("fail_closed", FAIL_MODES)
async def test_oversized_request_and_reply_are_faults_not_disconnects(
    kernel: Bus, nats_url: str, fail_closed: bool
) -> None:
    mod, stage = Module(unique("big")), f"custom.{unique('big')}"

    @mod.stage(stage, fail_closed=fail_closed)
    async def inflate(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({"blob": "x" * (kernel.port.nc.max_payload + 10)})

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.inflate"])
        too_big = {"blob": "y" * (kernel.port.nc.max_payload + 10)}
        expect(await kernel.intercept(stage, too_big), fail_closed, "oversize")
        expect(await kernel.intercept(stage, {}), fail_closed, "invalid")
        assert kernel.connected
