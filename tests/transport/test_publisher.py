"""The publish fast path: every length and subject framed right, past its caches' limits, and the flush threshold."""

from __future__ import annotations

from bus import Bus
from bus._transport.nats_connection import NatsConnection
from bus._transport.publisher import _CACHED_SIZES, FLUSH_AT_BYTES
from bus.testing import EventRecorder
from tests.support.waiting import barrier, without_barriers


async def test_events_of_every_length_arrive_whole_past_the_length_cache(nats_url: str) -> None:
    """More distinct lengths on one subject than the PUB-line cache keeps, some lengths repeated."""
    lengths = [*range(_CACHED_SIZES + 50), 7, 7, 300, 300]
    async with Bus(nats_url, name="lengths") as emitter, Bus(nats_url) as receiver:
        assert isinstance(emitter.port.conn, NatsConnection) and emitter.port.conn.fast
        recorder = EventRecorder()
        await receiver.subscribe("eva.custom.lengths", recorder)
        for n in lengths:
            assert await emitter.emit("eva.custom.lengths", {"text": "x" * n})
        await emitter.flush()
        await barrier(emitter, "eva.custom.lengths", recorder)
    assert [len(event.payload["text"]) for event in without_barriers(recorder.events)] == lengths


async def test_a_burst_over_the_flush_threshold_arrives_in_order(nats_url: str) -> None:
    """More than FLUSH_AT_BYTES buffered in one go: the fast path hands it over and waits, nothing lost."""
    text = "y" * 60_000
    count = FLUSH_AT_BYTES // len(text) * 2
    async with Bus(nats_url, name="burst") as emitter, Bus(nats_url) as receiver:
        recorder = EventRecorder()
        await receiver.subscribe("eva.custom.burst", recorder, pending_msgs=count * 2)
        for i in range(count):
            assert await emitter.emit("eva.custom.burst", {"i": i, "text": text})
        await emitter.flush()
        await barrier(emitter, "eva.custom.burst", recorder)
    assert [event.payload["i"] for event in without_barriers(recorder.events)] == list(range(count))
