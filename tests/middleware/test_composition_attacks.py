"""Switches on the shipped permissions: agents and modules cannot write them; only an operator's take effect."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bus import Bus, Cancel, Continue, NatsServer
from bus._middleware.registry import ensure_buckets
from bus._middleware.switches import Switches
from bus._switching import disable_handler, shadow_handler
from bus.testing import serving, wait_for_chain
from tests.conftest import as_user as url
from tests.conftest import shipped_server
from tests.middleware.test_attacks import Attacker, guard_module
from tests.support.waiting import wait_until

RM = {"name": "shell", "input": {"command": "rm -rf /"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "composition-attacks")


async def test_only_an_operator_switches_a_guard_off(server: NatsServer) -> None:
    async with Bus(url(server, "bus")) as bus:
        await ensure_buckets(bus.port)
    guard = guard_module()
    async with (
        serving(guard, url(server, "module-guard")),
        Bus(url(server, "agent-eva"), managed=["guard.no_rm"]) as eva,
    ):
        await wait_for_chain(eva, "tool.call", ["guard.no_rm"])
        attackers: list[Attacker] = []
        for user in ("agent-eva", "module-guard", "module-audit"):
            attacker = await Attacker().connect(server, user)
            attackers.append(attacker)
            off: Any = b'{"enabled": false}'
            await attacker.nc.publish("$KV.hookbus_trust.switch.guard.no_rm", off)  # disable the guard
            await attacker.nc.publish("$KV.hookbus_trust.switch.guard.no_rm", b'{"agents": []}')  # grant it to none
            await attacker.settle()
        await wait_until(lambda: all(len(a.denied) == 2 for a in attackers), what="every switch write refused")
        view = eva.middleware.view
        assert view is not None and view.switches == {}
        assert isinstance(await eva.intercept("tool.call", RM, {"agent": "eva"}), Cancel)
        async with Bus(url(server, "operator")) as op:
            await disable_handler(op, "guard.no_rm")
        await wait_for_chain(eva, "tool.call", [])
        assert await eva.intercept("tool.call", RM, {"agent": "eva"}) == Continue()
        for attacker in attackers:
            await attacker.nc.close()


@pytest.fixture(scope="module")
def shadow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "shadow-attacks")  # its own: no switch another test left


async def test_only_an_operator_puts_a_guard_in_shadow(shadow_server: NatsServer) -> None:
    """Shadow disarms a guard as surely as disable: agents and modules are refused, the operator's switch lands."""
    server = shadow_server
    async with Bus(url(server, "bus")) as bus:
        await ensure_buckets(bus.port)
    guard = guard_module()
    async with (
        serving(guard, url(server, "module-guard")),
        Bus(url(server, "agent-eva"), managed=["guard.no_rm"]) as eva,
    ):
        await wait_for_chain(eva, "tool.call", ["guard.no_rm"])
        attackers: list[Attacker] = []
        for user in ("agent-eva", "agent-bob", "module-guard", "module-audit"):
            attacker = await Attacker().connect(server, user)
            attackers.append(attacker)
            await attacker.nc.publish("$KV.hookbus_trust.switch.guard.no_rm", b'{"shadow": true}')
            await attacker.settle()
        await wait_until(lambda: all(len(a.denied) == 1 for a in attackers), what="every shadow write refused")
        view = eva.middleware.view
        assert view is not None and view.switches == {}
        assert isinstance(await eva.intercept("tool.call", RM, {"agent": "eva"}), Cancel)
        async with Bus(url(server, "operator")) as op:
            await shadow_handler(op, "guard.no_rm")
        await wait_until(lambda: view.switches.get("guard.no_rm", Switches()).shadow, what="the operator's switch")
        assert await eva.intercept("tool.call", RM, {"agent": "eva"}) == Continue()  # journaled would_cancel only
        async with Bus(url(server, "operator")) as op:
            await shadow_handler(op, "guard.no_rm", on=False)
        await wait_until(lambda: "guard.no_rm" not in view.switches, what="out of shadow")
        assert isinstance(await eva.intercept("tool.call", RM, {"agent": "eva"}), Cancel)
        for attacker in attackers:
            await attacker.nc.close()
