"""A watch's initial load holds every key the bucket held, even while keys are rewritten.

The server's pending count says 0 too early when a key is rewritten while a
watch starts (a module beating its heartbeat); a kernel that believed it
started without that module, and held its fail-closed guard as gone. The end
of the initial load is checked against the keys present before the watch.
"""

from __future__ import annotations

import asyncio

from bus import Bus
from bus._transport.kv import Bucket, bind_bucket
from tests.conftest import unique

#: Watches opened, AT_ONCE at a time; the old pending-count rule missed the rewritten keys in
#: about 1 of 80 of them, so a regression shows within a run.
TRIALS = 150
AT_ONCE = 15
BEATING = 4


async def test_the_initial_load_holds_keys_rewritten_while_the_watch_starts(nats_url: str) -> None:
    async with Bus(nats_url) as bus, Bus(nats_url) as beaters:
        name = unique("watchload")
        kv = await bind_bucket(bus.port, name)
        for number in range(30):
            await kv.put(f"static.{number}", b"s")
            if number % 3 == 0:
                await kv.delete(f"static.{number}")  # delete markers in the stream as well
        writer = await bind_bucket(beaters.port, name)
        for number in range(BEATING):
            await writer.put(f"beat.{number}", b"b")

        stop = asyncio.Event()

        async def beat(key: str) -> None:
            while not stop.is_set():  # not cancelled: nats-py's request can swallow a cancel (Python 3.11)
                await writer.put(key, b"b" * 200)
                await asyncio.sleep(0.002)

        beating = [asyncio.create_task(beat(f"beat.{number}")) for number in range(BEATING)]
        try:
            expected = {f"beat.{n}" for n in range(BEATING)} | {f"static.{n}" for n in range(30) if n % 3}
            for round_ in range(TRIALS // AT_ONCE):
                loads = await asyncio.gather(*(_initial_load(kv) for _ in range(AT_ONCE)))
                for seen in loads:
                    assert expected <= seen, f"round {round_}: the load ended without {sorted(expected - seen)}"
        finally:
            stop.set()
            await asyncio.gather(*beating)


async def _initial_load(kv: Bucket) -> set[str]:
    """The keys holding a value that one new watch delivers before it says its initial load is in."""
    watch = await kv.watch()
    seen: set[str] = set()
    try:
        async with asyncio.timeout(30):
            async for entry in watch:
                if entry is None:
                    return seen
                if entry.value is not None:
                    seen.add(entry.key)
    finally:
        await watch.stop()
    raise AssertionError("the watch ended before its initial load")
