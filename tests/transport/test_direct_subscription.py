"""Direct subscriptions (bus._transport.direct): the reader hands each message to the callback, on a real server."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from bus import Bus
from bus._transport.direct import DirectQueue
from bus._transport.internals import use_internals
from tests.support.waiting import wait_until


def _queue_of(sub: Any) -> object:
    return sub._pending_queue


@pytest.mark.parametrize("internals", [True, False], ids=["direct", "fallback"])
async def test_every_message_arrives_in_order_and_a_raising_callback_stops_nothing(
    nats_url: str, internals: bool, caplog: pytest.LogCaptureFixture
) -> None:
    use_internals(internals)
    try:
        async with Bus(nats_url) as receiver, Bus(nats_url) as sender:
            got: list[bytes] = []
            readers: list[object] = []

            def take(msg: Any) -> None:
                readers.append(asyncio.current_task())
                if msg.data == b"bad":
                    raise ValueError("a callback bug")
                if msg.data == b"cancel":  # nats-py's own callback task stops on this: the fallback is not sent it
                    raise asyncio.CancelledError
                got.append(msg.data)

            sub = await receiver.port.subscribe_direct("direct.test", take)
            assert isinstance(_queue_of(sub), DirectQueue) is internals
            await receiver.flush()
            with caplog.at_level(logging.ERROR, "hookbus.transport"):
                for index in range(200):
                    await sender.port.push("direct.test", b"bad" if index == 50 else str(index).encode())
                    if index == 100 and internals:
                        await sender.port.push("direct.test", b"cancel")
                await sender.flush()
                await wait_until(lambda: len(got) == 199, what="every good message")
            assert got == [str(i).encode() for i in range(200) if i != 50]
            assert receiver.connected
            if internals:  # called by the connection's reader itself: no task of the subscription's own
                assert {id(task) for task in readers} == {id(receiver.port.nc._reading_task)}
                assert "a direct subscription's callback raised on direct.test" in caplog.text
            witness: list[bytes] = []
            await receiver.port.subscribe_direct("direct.test", lambda msg: witness.append(msg.data))
            # The witness's SUB is on the server before the sender publishes (drain's own flush alone
            # left it behind about once in twenty runs of the fallback on Python 3.13).
            await receiver.flush()
            await sub.drain()
            await sender.port.push("direct.test", b"after")
            await sender.flush()
            # The same reader hands the witness its copy: once it has it, the drained one would have had it too.
            await wait_until(lambda: witness == [b"after"], what="the witness's copy")
            assert got[-1] == b"199", "nothing after the drain"
    finally:
        use_internals(None)


async def test_pending_bytes_never_build_up_on_a_direct_subscription(nats_url: str) -> None:
    async with Bus(nats_url) as receiver, Bus(nats_url) as sender:
        count = 0

        def take(msg: Any) -> None:
            nonlocal count
            count += 1

        sub = await receiver.port.subscribe_direct("direct.bytes", take)
        await receiver.flush()
        for _ in range(1000):
            await sender.port.push("direct.bytes", b"x" * 1000)
        await sender.flush()
        await wait_until(lambda: count == 1000, what="every message")
        assert sub.pending_bytes == 0 and sub.pending_msgs == 0


def test_nats_py_still_delivers_through_the_pending_queue() -> None:
    """The direct subscription stands in for this queue: fail when nats-py delivers another way."""
    source = inspect.getsource(Client._process_msg)
    assert "sub._pending_queue.put_nowait(msg)" in source
    assert "sub._pending_size += payload_size" in source
    assert "sub._pending_bytes_limit > 0" in source  # a limit of 0 is none
    drain = inspect.getsource(Subscription._drain)
    assert "await self._pending_queue.join()" in drain


async def test_a_drain_in_a_queue_group_hands_over_every_message_routed_to_it(nats_url: str) -> None:
    """A hot swap at the transport: one member of a queue group drains while messages stream in; none is lost."""
    total = 20_000
    async with Bus(nats_url) as first, Bus(nats_url) as second, Bus(nats_url) as sender:
        first_got: set[bytes] = set()
        second_got: set[bytes] = set()
        draining = await first.port.subscribe_direct("direct.swap", lambda msg: first_got.add(msg.data), queue="swap")
        await second.port.subscribe_direct("direct.swap", lambda msg: second_got.add(msg.data), queue="swap")
        await first.flush()
        await second.flush()

        async def stream() -> None:
            for index in range(total):
                waiting = sender.port.push_now("direct.swap", b"%d" % index)
                if waiting is not None:
                    await waiting
                if index % 100 == 0:
                    await asyncio.sleep(0)

        streaming = asyncio.ensure_future(stream())
        await wait_until(lambda: len(first_got) > 1000, what="traffic through the first member")
        await draining.drain()  # while the stream goes on
        await streaming
        await sender.flush()
        await wait_until(lambda: len(first_got) + len(second_got) >= total, what="every message", timeout=10)
        assert first_got | second_got == {b"%d" % index for index in range(total)}
        assert not first_got & second_got
