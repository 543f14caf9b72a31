"""Protocol 2: an idle fleet costs the kernels no registry traffic, and a killed module is absent at its first call.

Registry traffic is counted as every kernel's watch receives it: the messages on the modules bucket's
``$KV`` subjects, read by a raw subscription. Protocol 1 modules (a heartbeat) put once a beat each, so
the count grows with the modules; protocol 2 modules put nothing while they serve.
"""

from __future__ import annotations

import asyncio
import signal

import nats
import pytest

from bus import Bus, Cancel, Continue, Module
from bus._middleware.registry import MODULES_BUCKET, PROTOCOL, announcement_of, parse_announcement
from bus.testing import wait_for_chain
from tests.conftest import unique
from tests.support.mwproc import module_process
from tests.support.waiting import wait_until

#: How long the idle fleet is watched (counts only: no time is asserted).
IDLE_S = 2.0
BEAT_S = 0.5


def _module(name: str, heartbeat: float | None) -> Module:
    module = Module(name, heartbeat=heartbeat)

    @module.stage(f"{name}.stage")
    async def allow(stage: str, payload: dict[str, object]) -> Continue:
        return Continue()

    return module


async def _idle_registry_messages(url: str, modules: int, heartbeat: float | None) -> int:
    """Serve ``modules`` modules on one Bus, then count what the registry delivers to one watcher while idle."""
    names = [unique("idle") for _ in range(modules)]
    async with Bus(url, name="fleet") as fleet, Bus(url, name="kernel", trust_new=True) as kernel:
        tasks: list[asyncio.Task[None]] = []
        for name in names:
            ready = asyncio.Event()
            tasks.append(asyncio.create_task(_module(name, heartbeat).serve(bus=fleet, ready=ready)))
            await ready.wait()
        view = await kernel.middleware.start()
        await wait_until(
            lambda: len({ann.module for ann, _ in view.instances.values()} & set(names)) == modules,
            30,
            "the kernel to see every module",
        )
        raw = await nats.connect(url)
        count = 0

        async def counted(msg: object) -> None:
            nonlocal count
            count += 1

        try:
            await raw.subscribe(f"$KV.{MODULES_BUCKET}.>", cb=counted)
            await raw.flush()
            await asyncio.sleep(IDLE_S)
            await raw.flush()
        finally:
            await raw.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return count


@pytest.fixture
async def watching(nats_url: str) -> str:
    async with Bus(nats_url, name="warm", trust_new=True) as bus:
        await bus.middleware.start()  # the buckets exist before the fleets start
    return nats_url


@pytest.mark.parametrize("modules", [1, 10, 100])
async def test_idle_registry_traffic_does_not_grow_with_the_modules(watching: str, modules: int) -> None:
    beating = await _idle_registry_messages(watching, modules, BEAT_S)
    quiet = await _idle_registry_messages(watching, modules, None)
    print(f"idle registry messages per kernel, {modules} modules: protocol 1 {beating}, protocol 2 {quiet}")
    assert beating >= modules  # protocol 1: every module beat at least once while idle
    assert quiet == 0  # protocol 2: nothing, whatever the number of modules


def test_a_protocol_2_announcement_says_so_and_refreshes_within_the_max_age() -> None:
    module = _module("p2", None)
    ann = announcement_of(module, 300.0)
    back = parse_announcement(ann.to_bytes(), ann.key)
    assert back.refresh == 100.0 and back.interval == 100.0
    assert b'"protocol":%d' % PROTOCOL in ann.to_bytes()
    beating = announcement_of(_module("p1", 0.5))
    assert parse_announcement(beating.to_bytes(), beating.key).refresh == 0.0
    assert b'"protocol":1' in beating.to_bytes()


async def test_a_killed_protocol_2_guard_is_absent_at_the_first_call_and_then_holds(kernel: Bus, nats_url: str) -> None:
    name, stage = unique("absent"), "absent.check"
    flags = ("--behaviour", "guard", "--fail-closed", "--announce-once")
    with module_process(nats_url, name, stage, *flags) as proc:
        await wait_for_chain(kernel, stage, [f"{name}.h"])
        view = await kernel.middleware.start()
        live = [ann for ann, _ in view.instances.values() if ann.module == name]
        assert live and live[0].refresh > 0  # protocol 2: it does not beat
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        first = await kernel.intercept(stage, {"input": {"command": "ls"}})
        assert isinstance(first, Cancel) and "no responders" in (first.reason or "")
        # The kernel knows at once: the guard holds, cancelling without a request.
        await wait_for_chain(kernel, stage, [], timeout=5)
        held = await kernel.intercept(stage, {"input": {"command": "ls"}})
        assert isinstance(held, Cancel) and "is gone since" in (held.reason or "")
    # A new instance puts its announcement: the stage runs again.
    with module_process(nats_url, name, stage, *flags):
        await wait_for_chain(kernel, stage, [f"{name}.h"], timeout=10)
        after = await kernel.intercept(stage, {"input": {"command": "ls"}})
        assert not isinstance(after, Cancel)


async def test_a_rolling_upgrade_from_protocol_1_to_2_loses_no_decision(kernel: Bus, nats_url: str) -> None:
    """Kernels first (this one is protocol 2), then the module: a beating instance hands over to one that does not,
    while calls keep coming; every call gets the module's own decision."""
    name, stage = unique("roll"), "roll.check"
    decisions: list[object] = []
    stop = asyncio.Event()

    async def calls() -> None:
        while not stop.is_set():
            decisions.append(await kernel.intercept(stage, {"input": {}}))
            await asyncio.sleep(0.005)

    with module_process(nats_url, name, stage, "--behaviour", "cancel", "--heartbeat", "0.2") as old:
        await wait_for_chain(kernel, stage, [f"{name}.h"])
        caller = asyncio.create_task(calls())
        with module_process(nats_url, name, stage, "--behaviour", "cancel", "--announce-once"):
            view = await kernel.middleware.start()
            await wait_until(
                lambda: sum(1 for ann, _ in view.instances.values() if ann.module == name) == 2, 10, "both"
            )
            old.send_signal(signal.SIGTERM)  # the service manager stops the old one: it drains, then leaves
            old.wait(10)
            await wait_until(lambda: len(decisions) >= 100, 30, "calls after the handover")
            stop.set()
            await caller
            protocols = {ann.refresh > 0 for ann, _ in view.instances.values() if ann.module == name}
            assert protocols == {True}  # only the protocol 2 instance is left
    lost = [d for d in decisions if not (isinstance(d, Cancel) and d.reason == "denied by the process")]
    assert lost == [], f"{len(lost)} of {len(decisions)} decisions lost in the upgrade: {lost[:3]}"


async def test_an_instance_found_absent_that_still_answers_is_probed_back(kernel: Bus, nats_url: str) -> None:
    """No responders can be a moment's gap (a reconnect, interest not yet routed): the probe finds it back."""
    name, stage = unique("probe"), "probe.check"
    with module_process(nats_url, name, stage, "--behaviour", "cancel", "--announce-once"):
        await wait_for_chain(kernel, stage, [f"{name}.h"])
        view = await kernel.middleware.start()
        chain = view.chains[stage]
        view.absent(chain.links[0].subject)  # as a call meeting no responders would
        assert [ann for ann, _ in view.instances.values() if ann.module == name] == []
        await wait_for_chain(kernel, stage, [f"{name}.h"], timeout=10)  # no new put: the probe's answer
        decision = await kernel.intercept(stage, {"input": {}})
        assert isinstance(decision, Cancel) and decision.reason == "denied by the process"
