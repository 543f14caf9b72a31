"""Stopping one of two instances of a module (a hot swap, a rolling restart) loses no request in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import orjson

from bus import Bus, Cancel, Module
from bus._middleware.handler.serving import ModuleServer
from bus._middleware.registry import request_subject
from bus._transport.publisher import ordered_flush
from tests.conftest import unique

#: Requests kept in flight at once while one instance stops.
IN_FLIGHT = 16


async def test_an_instance_that_stops_answers_what_it_was_sent(nats_url: str) -> None:
    module = Module(unique("swap"))

    @module.stage("custom.swap")
    async def guard(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("guarded")

    async with Bus(nats_url, name="a") as first_bus, Bus(nats_url, name="b") as second_bus:
        first, second = ModuleServer(module, first_bus), ModuleServer(module, second_bus)
        subject = request_subject(first.announcement)  # both: the same subject, one queue group
        tasks = []
        for server in (first, second):
            ready = asyncio.Event()
            tasks.append(asyncio.ensure_future(server.run(ready)))
            await asyncio.wait_for(ready.wait(), 10)
        nc = await nats.connect(nats_url)
        request = orjson.dumps({"stage": "custom.swap", "payload": {}, "ctx": {"depth": 0, "id": "r"}})
        replies: list[bytes] = []
        stopped = asyncio.Event()

        async def ask() -> None:  # until the first instance stopped, then once more
            while True:
                done = stopped.is_set()
                replies.append((await nc.request(subject, request, timeout=10)).data)
                if done:
                    return

        try:
            askers = [asyncio.ensure_future(ask()) for _ in range(IN_FLIGHT)]
            while len(replies) < 4 * IN_FLIGHT:  # the traffic is flowing through both instances
                await asyncio.sleep(0.005)
            tasks[0].cancel()  # the first instance stops while requests stream in
            await asyncio.gather(tasks[0], return_exceptions=True)
            stopped.set()
            await asyncio.gather(*askers)  # a request dropped by the stopping instance times out here
            assert replies and all(orjson.loads(data)["decision"] == "cancel" for data in replies)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await nc.close()


async def test_requests_queued_behind_a_busy_handler_are_answered_before_the_stop_ends(nats_url: str) -> None:
    module = Module(unique("queued"), concurrency=1)
    started = asyncio.Event()

    @module.stage("custom.queued")
    async def slow(stage: str, payload: dict[str, Any]) -> Cancel:
        started.set()
        await asyncio.sleep(0.2)  # the scenario: a handler busy while two more requests queue behind it
        return Cancel("guarded")

    async with Bus(nats_url, name="module") as module_bus:
        server = ModuleServer(module, module_bus)
        ready = asyncio.Event()
        serving = asyncio.ensure_future(server.run(ready))
        await asyncio.wait_for(ready.wait(), 10)
        nc = await nats.connect(nats_url)
        try:
            request = orjson.dumps({"stage": "custom.queued", "payload": {}, "ctx": {"depth": 0, "id": "r"}})
            subject = request_subject(server.announcement)
            asks = [asyncio.ensure_future(nc.request(subject, request, timeout=10)) for _ in range(3)]
            await asyncio.wait_for(started.wait(), 10)
            await ordered_flush(nc, 5)  # all three reached the server, so they reach the module before its drain ends
            serving.cancel()  # stops while one runs and two wait for its slot
            await asyncio.gather(serving, return_exceptions=True)
            await module_bus.close()  # as Module.serve closes its own Bus once the server has stopped
            replies = await asyncio.gather(*asks)
            assert [orjson.loads(reply.data)["decision"] for reply in replies] == ["cancel"] * 3
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            await nc.close()
