"""A flood of events at wire speed never costs an agent a decision (bus/_bulk.py).

The agent subscribes to events and intercepts at once, in one process; other
processes flood its subscription faster than it can read. The server cuts the
connection the flood fills as a slow consumer (a small ``max_pending``, and a
handler that now and then holds the loop, make that certain): it is the
event subscriptions' own, so every intercept gets its module's decision
and the main connection is never cut. The subscription comes back after the
cut.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Event, NatsServer
from bus._bulk import BULK_SUFFIX
from bus.testing import wait_for_chain
from tests.conftest import as_user, shipped_permissions, unique
from tests.support.mwproc import module_process
from tests.support.waiting import wait_until

ROOT = str(Path(__file__).resolve().parents[2])
#: Decisions counted while the flood runs (and at least one cut has happened).
DECISIONS = 200
#: Intercepts in flight at once.
CALLERS = 4
FLOODERS = 2
#: Every HOLD_EVERY events the handler blocks the loop for HOLD_S: past the server's 500 ms write deadline
#: with what the floods send meanwhile, so a loaded machine that reads as fast as it is flooded is cut too.
HOLD_EVERY = 1000
HOLD_S = 0.6

FLOODER = textwrap.dedent(
    """
    import asyncio, sys
    import nats
    from bus._core.encoder import Encoder

    async def main():
        nc = await nats.connect(sys.argv[1], pending_size=64 * 1024 * 1024)
        data, _ = Encoder(1024 * 1024, "flooder", cut=False).encode("flood.tick", {"pad": "x" * 200}, None, 0, None)
        print("ready", flush=True)
        while True:
            for _ in range(2000):
                await nc.publish("flood.tick", data)
            await asyncio.sleep(0)

    asyncio.run(main())
    """
)


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A server that cuts a client as a slow consumer once 1 MiB waits for it (NATS's default is 64 MiB)."""
    config = tmp_path / "small.conf"
    config.write_text('max_pending: 1048576\nwrite_deadline: "500ms"\n')
    with NatsServer(config_file=config, http_port=0) as server:
        yield server


def _flooders(url: str) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [
        subprocess.Popen([sys.executable, "-c", FLOODER, url], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(FLOODERS)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", f"flooder exited {proc.poll()}"
    return procs


def _varz(server: NatsServer) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/varz", timeout=5) as reply:
        data: dict[str, Any] = orjson.loads(reply.read())
    return data


async def test_a_flood_that_cuts_the_event_connection_costs_no_decision(small_server: NatsServer) -> None:
    name, stage = unique("flood"), "flood.check"
    url = small_server.url
    with module_process(url, name, stage, "--behaviour", "cancel", "--timeout", "5"):
        async with Bus(url, name="agent", trust_new=True) as agent:
            await wait_for_chain(agent, stage, [f"{name}.h"])
            received: list[Event] = []

            async def on_event(event: Event) -> None:
                received.append(event)
                if len(received) % HOLD_EVERY == 0:  # now and then a handler holds the loop (a sync call, a
                    time.sleep(HOLD_S)  # GC pause): the flood fills the socket, however fast the machine reads
                await asyncio.sleep(0.001)  # a handler that takes a moment, as real ones do

            await agent.subscribe("flood.>", on_event)
            decisions: list[object] = []
            floods = _flooders(url)
            try:

                async def caller() -> None:
                    while len(decisions) < DECISIONS or agent._bulk.cuts == 0:
                        decisions.append(await agent.intercept(stage, {"input": {}}))
                        if len(decisions) > 50 * DECISIONS:
                            return  # no cut in all this time: the assertion below says so

                await asyncio.gather(*(caller() for _ in range(CALLERS)))
            finally:
                for proc in floods:
                    proc.kill()
                    proc.wait(10)
                    assert proc.stdout is not None
                    proc.stdout.close()
            assert agent._bulk.cuts >= 1, "the flood never made the server cut the event connection"
            assert _varz(small_server)["slow_consumers"] >= 1
            lost = [d for d in decisions if not (isinstance(d, Cancel) and d.reason == "denied by the process")]
            assert lost == [], f"{len(lost)} of {len(decisions)} decisions lost to the flood: {lost[:3]}"
            assert agent.stats.disconnects == 0  # the main connection was never cut
            # The event subscriptions come back after the cut.
            before = len(received)
            await wait_until(lambda: agent._bulk.conn is not None and agent._bulk.conn.is_connected, 20, "reconnect")
            async with Bus(url, name="emitter") as emitter:

                async def delivered() -> bool:
                    await emitter.emit("flood.after", {"n": 1})
                    await asyncio.sleep(0.05)
                    return any(ev.subject == "flood.after" for ev in received[before:])

                await wait_until(delivered, 20, "an event after the cut")


@pytest.fixture(scope="module")
def permissions_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    config = shipped_permissions(tmp_path_factory.mktemp("bulk"))
    with NatsServer(config_file=config, jetstream=False, http_port=0) as server:
        yield server


def _connz(server: NatsServer) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/connz?auth=1&subs=1", timeout=5) as reply:
        data: dict[str, Any] = orjson.loads(reply.read())
    return list(data.get("connections") or [])


@pytest.mark.parametrize("user", ["worker", "bus"])
async def test_the_event_connection_logs_in_as_the_same_user_under_the_shipped_permissions(
    permissions_server: NatsServer, user: str
) -> None:
    url = as_user(permissions_server, user)
    async with Bus(url, name="proc") as bus:
        got: list[Event] = []
        await bus.subscribe("prx.lifecycle.>", got.append)
        await bus.emit("prx.lifecycle.tool_call", {"n": 1})
        await wait_until(lambda: got, 10, "the event on the event connection")
        assert got[0].publisher == user  # vouched, as on one connection
        mine = [conn for conn in _connz(permissions_server) if conn.get("name", "").startswith("proc")]
        assert sorted(conn["name"] for conn in mine) == ["proc", "proc" + BULK_SUFFIX]
        assert {conn.get("authorized_user") for conn in mine} == {user}


async def test_the_event_connection_reaches_nothing_its_user_may_not(permissions_server: NatsServer) -> None:
    """Attack: a second socket per process is no second identity. A worker asks, on its event connection, for the
    agents' middleware requests (their tool calls); the server refuses it and delivers none."""
    async with Bus(as_user(permissions_server, "worker"), name="nosy") as nosy:
        got: list[Event] = []
        await nosy.subscribe("hookbus.mw.>", got.append)
        barrier: list[Event] = []
        await nosy.subscribe("prx.lifecycle.barrier", barrier.append)
        await wait_until(lambda: nosy.stats.dropped.get("denied", 0) >= 1, 10, "the refusal")
        async with Bus(as_user(permissions_server, "agent-eva"), name="victim") as victim:
            await victim.port.publish_raw("hookbus.mw.guard.x", b'{"stage":"tool.call"}')
            await victim.emit("prx.lifecycle.barrier")  # after it, from the same connection: arrives after it
            await victim.flush()
        await wait_until(lambda: barrier, 10, "the barrier")
        assert got == []
        assert nosy.connected  # refused, not cut: the main connection carries on
