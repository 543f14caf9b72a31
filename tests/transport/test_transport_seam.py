"""The transport's own types: KV buckets, raw requests and streams answer in hookbus terms, against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from bus import Bus, NatsServer
from bus._core.errors import JournalError, NoResponders, RegistryError, RequestTimeout
from bus._transport.kv import KvEntry
from bus._transport.streams import StreamSpec
from tests.conftest import run_cli, unique


async def test_a_bucket_reads_writes_and_watches_in_hookbus_types(bus: Bus) -> None:
    bucket = await bus.port.open_bucket(unique("seam"))
    assert await bucket.get("a") is None  # never written
    assert await bucket.create("a", b"1") is True
    assert await bucket.create("a", b"2") is False  # exists: not overwritten
    entry = await bucket.get("a")
    assert entry is not None and entry.value == b"1" and entry.revision > 0
    watch = await bucket.watch()
    seen: list[KvEntry | None] = []

    async def follow() -> None:
        async for item in watch:
            seen.append(item)
            if item is not None and item.key == "end":
                return

    task = asyncio.create_task(follow())
    await bucket.put("b", b"2")
    await bucket.delete("a")
    await bucket.put("end", b"barrier")
    await asyncio.wait_for(task, 10)
    await watch.stop()
    assert [(e.key, e.value) if e is not None else None for e in seen] == [
        ("a", b"1"),  # what was stored when the watch began ...
        None,  # ... then the end of it ...
        ("b", b"2"),  # ... then each change, a delete as a None value
        ("a", None),
        ("end", b"barrier"),
    ]
    assert await bucket.get("a") is None  # deleted


async def test_a_server_without_jetstream_refuses_buckets_and_streams_in_hookbus_errors() -> None:
    with NatsServer(jetstream=False) as server:
        async with Bus(server.url) as plain:
            with pytest.raises(RegistryError, match="JetStream is not available"):
                await plain.port.open_bucket("hookbus_modules")
            with pytest.raises(JournalError, match="HOOKBUS_SEAM"):
                await plain.port.ensure_stream(StreamSpec("HOOKBUS_SEAM", ("seam.>",), 60.0, 1 << 20, 60.0))


async def test_a_raw_request_fails_in_hookbus_terms(bus: Bus) -> None:
    subject = f"seam.{unique('req')}"
    with pytest.raises(NoResponders, match=subject):
        await bus.port.request_raw(subject, b"", timeout=1.0)

    async def silent(msg: object) -> None:
        return None  # listens, never answers

    await bus.port.subscribe_raw(subject, silent)
    await bus.flush()
    with pytest.raises(RequestTimeout, match=subject):
        await bus.port.request_raw(subject, b"", timeout=0.2)


async def test_triggers_list_with_no_engine_running_says_so(nats_url: str, tmp_path: Path) -> None:
    listing = await asyncio.to_thread(
        run_cli, "triggers", "--workspace", str(tmp_path), "list", "--json", "--nats-url", nats_url
    )
    assert listing.returncode == 0, listing.stderr
    assert orjson.loads(listing.stdout)["running"] is False
    assert "Traceback" not in listing.stderr
