"""``hookbus mcp`` as the agent's NATS user on the shipped permissions: its intercepts are answered by the
fleet's guard only, another agent can neither read its inbox nor forge its answers, and its events carry the
identity the server vouches for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Cancel, Continue, Decision, Module, NatsServer
from bus._journal.entries import ensure_journal_stream
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.adapters.mcp_support import TIME_SERVER, over_stdio, proxy_env, text_of
from tests.conftest import as_user as url
from tests.conftest import shipped_server
from tests.middleware.test_attacks import Attacker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "mcp-attacks")


def time_guard() -> Module:
    guard = Module("guard", heartbeat=0.5)

    @guard.stage("tool.call", fail_closed=True, match="mcp__time__get_current_time")
    async def no_pyongyang(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("not that zone") if payload["input"].get("timezone") == "Asia/Pyongyang" else Continue()

    return guard


async def test_the_proxy_as_an_agent_user_cannot_be_answered_or_read_by_another(
    server: NatsServer, tmp_path: Path
) -> None:
    async with Bus(url(server, "operator"), trust_new=True) as op:
        await op.middleware.start()
        await ensure_journal_stream(op.port)
    attacker = await Attacker().connect(server, "agent-bob")
    forged = b'{"decision": "continue"}'
    try:
        for pattern in ("_INBOX.agent-eva.>", "prx.lifecycle.>"):
            await attacker.sniff(pattern)
        await attacker.settle()
        async with (
            serving(time_guard(), url(server, "module-guard")),
            Bus(url(server, "operator"), trust_new=True) as op,
            Bus(url(server, "worker"), name="watcher") as watcher,
        ):
            await wait_for_chain(op, "tool.call", ["guard.no_pyongyang"])
            events = EventRecorder()
            await watcher.subscribe("prx.lifecycle.>", events)
            await watcher.flush()
            env = proxy_env(url(server, "agent-eva"), tmp_path / "state")
            async with over_stdio(env, "--name", "time", "--", TIME_SERVER) as session:

                async def spray() -> None:
                    for i in range(50):
                        await attacker.nc.publish(f"_INBOX.agent-eva.{i}", forged)
                    await attacker.settle()

                sprayer = asyncio.create_task(spray())
                refused = [
                    await session.call_tool("get_current_time", {"timezone": "Asia/Pyongyang"}) for _ in range(5)
                ]
                await sprayer
                allowed = await session.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
            got = await events.wait_for(12)
    finally:
        await attacker.nc.close()
    assert all(r.is_error and "not that zone" in text_of(r) for r in refused), "forged answers changed nothing"
    assert not allowed.is_error and "Asia/Tokyo" in text_of(allowed)
    assert len(attacker.denied) >= 2 and not attacker.received  # no sniffing, no publishing into eva's inbox
    assert {e.publisher for e in got} == {"agent-eva"}, "every event vouched as the proxy's user"
