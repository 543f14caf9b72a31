"""Flush keeps its promise: once it returns, the server has what was queued before it.

nats-py 2.x writes flush's PING straight to the socket while SUB and PUB wait
in its pending buffer, so a plain ``flush`` can return before the server saw
them (bus._transport.publisher.ordered_flush works around it). These tests fail on the
plain behaviour, and notice when nats-py changes the part the workaround uses.
"""

from __future__ import annotations

import asyncio
import inspect
from importlib.metadata import version

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from bus import Bus
from bus._transport.internals import internals_enabled, use_internals, within_tested_range
from bus._transport.nats_connection import NatsConnection
from bus._transport.publisher import fast_path_available, ordered_flush

#: Fresh subscriber connections in the loop: plain nats-py loses 3-10 in 100 here.
PAIRS = 300
#: How long one first message may take before it counts as lost (loopback delivers in well under 1 ms).
LOST_AFTER = 2.0


async def _first_message_arrives(url: str, publisher: Client, subject: str) -> bool:
    """Subscribe on a fresh connection, flush, publish from another: does the message arrive?"""
    subscriber = await nats.connect(url)
    try:
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Msg) -> None:
            if not got.done():
                got.set_result(msg.data)

        await subscriber.subscribe(subject, cb=on_msg)
        await ordered_flush(subscriber, 5.0)
        await publisher.publish(subject, b"first")
        await ordered_flush(publisher, 5.0)
        try:
            return await asyncio.wait_for(got, LOST_AFTER) == b"first"
        except TimeoutError:
            return False
    finally:
        await subscriber.close()


async def test_ordered_flush_loses_no_first_message(nats_url: str) -> None:
    publisher = await nats.connect(nats_url)
    try:
        lost = [i for i in range(PAIRS) if not await _first_message_arrives(nats_url, publisher, f"flushcheck.{i}")]
    finally:
        await publisher.close()
    assert lost == [], f"{len(lost)} of {PAIRS} first messages never arrived"


async def test_bus_subscribe_is_in_place_when_it_returns(nats_url: str) -> None:
    """Bus.subscribe returns once the server has the subscription: an emit from elsewhere right after arrives."""
    async with Bus(nats_url, name="emitter") as emitter:
        for i in range(60):
            async with Bus(nats_url, name=f"listener{i}") as listener:
                got: asyncio.Queue[str] = asyncio.Queue()
                await listener.subscribe("eva.custom.flushcheck", lambda e, q=got: q.put_nowait(e.id))
                await emitter.emit("eva.custom.flushcheck", {"i": i})
                await emitter.flush()
                event_id = await asyncio.wait_for(got.get(), LOST_AFTER)
                assert event_id


async def test_ordered_flush_empties_the_pending_buffer(nats_url: str) -> None:
    """The queued SUB goes out before the PING: after the flush nothing waits in nats-py's buffer."""
    nc = await nats.connect(nats_url)
    try:
        assert fast_path_available(nc), "nats-py lacks the internals ordered_flush uses: the fallback runs"
        await nc.subscribe("flushcheck.buffer")
        assert nc._pending_data_size > 0, "nats-py no longer buffers SUB: re-check whether ordered_flush is needed"
        await ordered_flush(nc, 5.0)
        assert nc._pending_data_size == 0
    finally:
        await nc.close()


def test_nats_py_still_pings_past_its_buffer() -> None:
    """The behaviour worked around: flush's PING bypasses the pending buffer.

    If this fails, nats-py changed how it flushes: check whether its flush now
    orders after queued commands and remove bus._transport.publisher.ordered_flush's
    workaround (docs/events.md, "What flush guarantees").
    """
    assert version("nats-py").startswith("2."), "a new nats-py major version: re-check ordered_flush"
    source = inspect.getsource(Client._send_ping)
    assert "self._transport.write(PING_PROTO)" in source


def test_the_internals_are_used_only_within_the_tested_range() -> None:
    assert within_tested_range(version("nats-py")), "nats-py moved past the tested range: re-check, then widen it"
    assert within_tested_range("2.16.0") and within_tested_range("2.16.11")
    assert not within_tested_range("2.17.0")
    assert not within_tested_range("3.0.0")
    assert not within_tested_range("2.15.9")
    assert not within_tested_range("garbage")


async def test_switched_off_the_public_api_keeps_every_promise(nats_url: str) -> None:
    """With the internals off: no fast path, and subscribe/emit/flush still lose no first message."""
    use_internals(False)
    try:
        async with Bus(nats_url, name="emitter") as emitter:
            assert isinstance(emitter.port.conn, NatsConnection) and not emitter.port.conn.fast
            assert not fast_path_available(emitter.port.nc)
            for i in range(30):
                async with Bus(nats_url, name=f"listener{i}") as listener:
                    got: asyncio.Queue[str] = asyncio.Queue()
                    await listener.subscribe("eva.custom.switchoff", lambda e, q=got: q.put_nowait(e.id))
                    await emitter.emit("eva.custom.switchoff", {"i": i})
                    await emitter.flush()
                    assert await asyncio.wait_for(got.get(), LOST_AFTER)
    finally:
        use_internals(None)
    async with Bus(nats_url) as bus:
        assert isinstance(bus.port.conn, NatsConnection) and bus.port.conn.fast, "back on: the fast path runs again"


def test_the_environment_switch_turns_the_internals_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert internals_enabled()
    monkeypatch.setenv("HOOKBUS_NATS_INTERNALS", "off")
    assert not internals_enabled()
