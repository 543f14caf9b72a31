"""hookbus on a real 3-node NATS cluster (processes on loopback): flow across nodes, failover."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Cancel, Continue, Module, Stage
from bus._journal.entries import STREAM, JournalEntry, ensure_journal_stream, publish_entry
from bus.testing import EventRecorder, NatsCluster, serving, wait_for_chain
from subscribers.journal._store import DB_NAME, JournalStore
from subscribers.journal.sink import JournalSink
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker
from tests.support.waiting import (
    barrier_payload,
    is_barrier,
    probe_until,
    wait_for_interest,
    wait_until,
    without_barriers,
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[NatsCluster]:
    with NatsCluster(3) as started:
        yield started


async def test_events_and_journal_flow_across_nodes(cluster: NatsCluster, workspace: Path) -> None:
    n1, n2, n3 = cluster.urls
    async with Bus(n1, name="agent") as agent, Bus(n3, name="worker") as worker, Bus(n2, name="sink") as sink_bus:
        rec = EventRecorder()
        await worker.subscribe("prx.lifecycle.>", rec, queue="workers")
        await wait_for_interest(agent, worker)  # interest propagates over the routes
        for i in range(50):
            await agent.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True, "output": str(i)})
        events = await rec.wait_for(50)
        assert [e.payload["output"] for e in events] == [str(i) for i in range(50)]

        await ensure_journal_stream(sink_bus.port)  # replicas follow the cluster's size
        info = await sink_bus.port.nc.jetstream().stream_info(STREAM)
        assert info.config.num_replicas == 3
        for bucket in ("KV_hookbus_modules", "KV_hookbus_trust"):
            await agent.middleware.start()
            assert (await sink_bus.port.nc.jetstream().stream_info(bucket)).config.num_replicas == 3
        sink = JournalSink(sink_bus, workspace, durable="cluster-sink")
        stop = asyncio.Event()
        task = asyncio.create_task(sink.run(stop))
        try:
            for i in range(20):
                await publish_entry(
                    agent.port,
                    JournalEntry(
                        kind="shell_hook", point="prx.lifecycle.tool_call", phase="run", who=f"h{i}", decision="ok"
                    ),
                )
            await wait_until(lambda: sink.stored >= 20)
        finally:
            stop.set()
            await task
        store = JournalStore(workspace / DB_NAME)
        assert store.count() == 20
        store.close()


async def test_intercepts_and_shell_hooks_across_nodes(cluster: NatsCluster, workspace: Path) -> None:
    """Agent on node 1, a handler module on node 2, a shell-hook worker on node 3."""
    n1, n2, n3 = cluster.urls
    guard = Module("cluster-guard")

    @guard.stage(Stage.TOOL_CALL)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
        return Cancel("only by hand") if "rm" in payload["input"]["command"] else Continue()

    (workspace / "hooks.json").write_text(
        '{"hooks": {"tool_call": [{"command": "/bin/sh", "args": ["-c", "echo ran >> hooked"]}]}}'
    )
    async with Bus(n1, name="agent", managed=["cluster-guard.no_rm"]) as agent, Bus(n3, name="worker") as worker_bus:
        async with (
            serving(guard, n2),
            ShellWorker(worker_bus, workspace, WorkerSettings(poll_interval_s=0.05)) as worker,
        ):
            await wait_for_chain(agent, "tool.call", ["cluster-guard.no_rm"])
            decision = await agent.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "rm -rf /"}})
            assert decision == Cancel("only by hand", "cluster-guard.no_rm")
            await wait_for_interest(agent, worker_bus)  # the worker's interest crosses the routes
            await agent.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True, "output": ""})
            await wait_until(lambda: worker.stats.runs == 1)
        assert (workspace / "hooked").read_text() == "ran\n"


async def test_agent_fails_over_when_its_node_dies(tmp_path: Path) -> None:
    with NatsCluster(3) as cluster:
        n1, _, n3 = cluster.urls
        async with Bus(n1, name="agent") as agent, Bus(n3, name="watcher") as watcher:
            rec = EventRecorder()
            await watcher.subscribe("eva.custom.tick", rec)
            await wait_for_interest(agent, watcher)
            sent = 0
            start = time.monotonic()
            killed_at = None
            while time.monotonic() - start < 4.0:
                # emit never raises and never blocks the loop, whatever happens to node 1
                await asyncio.wait_for(agent.emit("eva.custom.tick", {"n": sent}), timeout=2)
                sent += 1
                if killed_at is None and time.monotonic() - start > 1.0:
                    cluster.nodes[0].kill()
                    killed_at = sent
                await asyncio.sleep(0.005)  # the load's pacing: about 200 events a second, for 4 s
            await wait_until(lambda: agent.connected)
            # Barriers after the last tick, from the same connection, until one arrives: every tick that
            # will ever arrive has then arrived (the node the agent failed over to may learn of the
            # watcher's interest only now, so the first barriers may be lost like the ticks around the kill).
            await probe_until(
                lambda: agent.emit("eva.custom.tick", barrier_payload()),
                lambda: any(map(is_barrier, rec.events)),
                what="a barrier after the failover",
            )
            seen = {e.payload["n"] for e in without_barriers(rec.events)}
            assert agent.stats.reconnects >= 1
            assert agent.port.nc.connected_url is not None and agent.port.nc.connected_url.port != cluster.nodes[0].port
            lost = sorted(set(range(sent)) - seen)
            assert killed_at is not None
            # At-most-once: only what was in flight around the kill may be lost.
            assert len(lost) < sent - killed_at, "events after the failover arrive"
            assert max(seen) == sent - 1
            assert all(n >= killed_at - 50 for n in lost), "nothing sent well before the kill is lost"
            print(f"\nfailover: {sent} emitted, {len(lost)} lost, reconnects {agent.stats.reconnects}")
