"""The agent-hook relay knows which agent asked, on deploy/nats/permissions.conf as shipped.

Each agent asks on its own ``hookbus.adapter.<flavor>.<user>``: agent-bob
cannot ask as agent-eva, an intercept bob's hook made is journaled as relayed
for bob, and bob flooding the relay leaves slots for eva.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Continue, Decision, Module, NatsServer
from bus._core.errors import PublishDenied
from bus._middleware.registry import ensure_buckets
from bus._transport import oneshot
from bus.adapters._subjects import adapter_subject
from bus.adapters.claude_code._fair_slots import ANONYMOUS, FairSlots
from bus.adapters.claude_code.relay import PER_USER, Relay
from bus.testing import serving, wait_for_chain
from tests.adapters.test_claude_code import bash, claude_hook, denial, env_for, hook_input
from tests.conftest import as_user, shipped_server
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "relay-askers")


class Holder:
    """A guard whose ``hold`` calls wait until released: how many it holds is what the relay let through."""

    def __init__(self) -> None:
        self.name = "guard"  # the module name module-guard may serve
        self.module = Module(self.name)
        self.held = 0
        self.release = asyncio.Event()

        @self.module.stage("tool.call", timeout=30.0)
        async def gate(stage: str, payload: dict[str, Any]) -> Decision:
            command = str(payload.get("input", {}).get("command", ""))
            if command == "hold":
                self.held += 1
                await self.release.wait()
                return Continue()
            return Cancel("only by hand") if "rm -rf" in command else Continue()


@pytest.fixture
async def relayed(shipped: NatsServer) -> AsyncIterator[Holder]:
    """The holder served as module-guard and trusted, and the relay running as ``bus``."""
    holder = Holder()
    async with Bus(as_user(shipped, "bus"), name="hookbus-up") as bus:
        await ensure_buckets(bus.port)
        relay = Relay(bus)
        try:
            async with serving(holder.module, as_user(shipped, "module-guard"), detach_on_stop=True):
                async with Bus(as_user(shipped, "operator"), trust_new=True) as operator:
                    await wait_for_chain(operator, "tool.call", [f"{holder.name}.gate"])
                await relay.start()
                yield holder
                holder.release.set()
        finally:
            await relay.stop()


def request_body(command: str) -> bytes:
    return orjson.dumps({"input": hook_input("PreToolUse", tool_name="Bash", tool_input={"command": command})})


async def test_an_agent_cannot_ask_the_relay_as_another(shipped: NatsServer, relayed: Holder) -> None:
    bob = {"HOOKBUS_NATS_USER": "agent-bob", "HOOKBUS_NATS_PASSWORD": "change-me-agent-bob"}
    servers = [f"nats://127.0.0.1:{shipped.port}"]
    assert oneshot.user_of(servers, bob) == "agent-bob"
    for subject in (adapter_subject("claude-code", "agent-eva"), adapter_subject("codex"), "hookbus.adapter.x.y"):
        with pytest.raises(PublishDenied, match="Permissions Violation for Publish"):
            await asyncio.to_thread(
                oneshot.request,
                servers,
                subject,
                request_body("rm -rf /"),
                bob,
                name="bob-as-eva",
                connect_budget=5.0,
                timeout=10.0,
            )
    own = await asyncio.to_thread(
        oneshot.request,
        servers,
        adapter_subject("claude-code", "agent-bob"),
        request_body("rm -rf /"),
        bob,
        name="bob",
        connect_budget=5.0,
        timeout=10.0,
    )
    assert own is not None and b"only by hand" in own, own


async def test_an_intercept_through_the_relay_is_journaled_as_the_askers(
    shipped: NatsServer, relayed: Holder, tmp_path: Path
) -> None:
    async with Bus(as_user(shipped, "operator")) as operator:
        entries: list[dict[str, Any]] = []

        async def keep(msg: Any) -> None:
            entries.append(orjson.loads(msg.data))

        await operator.port.subscribe_raw("hookbus.journal.middleware.bus", keep)
        await operator.flush()
        code, output, stderr = await claude_hook(bash("rm -rf /"), env_for(as_user(shipped, "agent-bob"), tmp_path))
        assert code == 0 and denial(output) == f"hookbus ({relayed.name}.gate): only by hand", stderr
        await wait_until(lambda: any(e["who"] == f"{relayed.name}.gate" for e in entries), what="the journal entry")
    (entry,) = [e for e in entries if e["who"] == f"{relayed.name}.gate"]
    assert entry["decision"] == "cancel" and entry["agent"] == "claude-code"
    assert entry["process"] == "relay:agent-bob", entry


async def test_one_agent_flooding_the_relay_does_not_starve_another(shipped: NatsServer, relayed: Holder) -> None:
    flood = 80  # more than the relay's 64 slots: first come, first served, bob would hold them all
    async with Bus(as_user(shipped, "agent-bob")) as bob, Bus(as_user(shipped, "agent-eva")) as eva:
        held = [
            asyncio.ensure_future(
                bob.port.request_raw(adapter_subject("claude-code", "agent-bob"), request_body("hold"), 60)
            )
            for _ in range(flood)
        ]
        await wait_until(lambda: relayed.held >= PER_USER, what="bob's calls reaching the holder")
        reply = await eva.port.request_raw(adapter_subject("claude-code", "agent-eva"), request_body("rm -rf /"), 20)
        assert b"only by hand" in reply, reply  # eva answered while bob's flood waits
        assert relayed.held == PER_USER, "bob holds no more than his share"
        assert not any(task.done() for task in held)
        relayed.release.set()
        replies = await asyncio.gather(*held)
    assert all(orjson.loads(r)["exit_code"] == 0 for r in replies) and relayed.held == flood


def test_the_slots_are_shared_in_turn_and_bounded() -> None:
    started: list[str] = []
    slots = FairSlots(total=3, per_user=2, waiting_per_user=2, waiting_total=3)

    def job(tag: str) -> Any:
        return lambda: started.append(tag)

    for n in range(4):
        assert slots.offer("bob", job(f"bob{n}")) is None
    assert slots.offer("bob", job("bob4")) == "2 requests of bob already wait; refused"
    assert slots.offer("eva", job("eva0")) is None  # the third slot is free and eva's
    assert slots.offer("ann", job("ann0")) is None  # waits: all slots taken
    assert slots.offer("ann", job("ann1")) == "3 requests already wait for the relay; refused"
    assert started == ["bob0", "bob1", "eva0"]
    slots.release("eva")  # bob is at his cap: ann's turn
    assert started[-1] == "ann0"
    slots.release("bob")
    assert started[-1] == "bob2" and slots.running("bob") == 2
    slots.release("ann")  # a slot is free, but bob is at his cap: his next one waits
    assert started[-1] == "bob2"
    slots.release("bob")
    assert started[-1] == "bob3" and slots.running("bob") == 2 and slots.running("ann") == 0


def test_requests_without_a_user_name_share_every_slot() -> None:
    started: list[int] = []
    slots = FairSlots(total=3, per_user=1, waiting_per_user=1, waiting_total=1)
    for n in range(3):
        assert slots.offer(ANONYMOUS, lambda n=n: started.append(n)) is None
    assert started == [0, 1, 2] and slots.running(ANONYMOUS) == 3


async def test_a_user_name_no_subject_takes_is_the_fail_mode_not_a_pass(shipped: NatsServer, tmp_path: Path) -> None:
    env = env_for(f"nats://a%40b:pw@127.0.0.1:{shipped.port}", tmp_path)
    code, output, stderr = await claude_hook(bash("ls"), env, "--fail-closed")
    assert code == 0 and "is fail-closed and the bus cannot be reached" in denial(output), stderr
    assert "a@b" in denial(output)
