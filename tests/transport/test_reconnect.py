"""Transport trouble never reaches the caller of emit; delivery resumes after the server returns."""

from __future__ import annotations

import asyncio

from bus import Bus, NatsServer
from bus.testing import EventRecorder
from tests.support.waiting import probe_until, wait_until


async def test_emit_while_server_down_neither_blocks_nor_raises(own_server: NatsServer) -> None:
    small_buffer = {"pending_size": 16 * 1024}
    async with Bus(own_server.url, nats_options=small_buffer) as agent, Bus(own_server.url) as watcher:
        rec = EventRecorder()
        await watcher.subscribe("eva.custom.>", rec)
        await watcher.flush()
        await agent.emit("eva.custom.before", {})
        await rec.wait_for(1)

        await asyncio.to_thread(own_server.stop)
        await wait_until(lambda: not agent.connected)
        # 200 events of ~1 KB: the first ones fill the 16 KB buffer, the rest are dropped and counted.
        # A liveness bound, not a timing claim: the loop must finish at all while the server is gone.
        sent = await asyncio.wait_for(
            asyncio.gather(*[agent.emit("eva.custom.during", {"i": i, "pad": "x" * 1000}) for i in range(200)]),
            timeout=10,
        )
        assert any(sent) and not all(sent)
        assert agent.stats.dropped["disconnected"] == sent.count(False)
        assert agent.stats.disconnects >= 1

        await asyncio.to_thread(own_server.start)
        await wait_until(lambda: agent.connected and watcher.connected)
        await watcher.flush()
        await agent.emit("eva.custom.after", {"back": True})
        await wait_until(lambda: "eva.custom.after" in rec.subjects)
        assert agent.stats.reconnects >= 1


async def test_subscriber_survives_a_server_restart(own_server: NatsServer) -> None:
    async with Bus(own_server.url) as agent, Bus(own_server.url) as worker:
        rec = EventRecorder()
        await worker.subscribe("prx.lifecycle.*", rec)
        await worker.flush()
        await asyncio.to_thread(own_server.restart)
        await wait_until(lambda: agent.connected and worker.connected)
        await worker.flush()
        # the agent may come back before the worker's interest is re-sent: probe until one arrives
        await probe_until(
            lambda: agent.emit("prx.lifecycle.error", {"component": "x", "message": "y"}),
            lambda: rec.events,
            what="an event after the restart",
        )
        assert rec.events[0].payload["component"] == "x"
