"""Nothing emptied, nothing lost past the size limit: the claim check and the proportional cut, for real.

An event over the bus limit keeps its payload whole in the ``hookbus_payloads``
object store of a real nats-server; shell hooks (real processes), Python
subscribers and ``hookbus tail --full`` get it back whole, checked against
the reference. Hostile references are refused with a reason. Without the
store the largest strings are cut in proportion so the envelope uses the limit.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats.errors as nats_errors
import orjson
import pytest
from nats.aio.client import Client

from bus import Bus, Event, NatsServer
from bus._core.claim import DEFAULT_MAX_OBJECT_BYTES, reference
from bus._core.encoder import Encoder
from bus._core.envelope import DEFAULT_MAX_BYTES, decode_event
from bus._core.errors import EnvelopeError, PayloadRefError
from bus._core.subjects import PAYLOADS_BUCKET, PAYLOADS_CHUNKS, PAYLOADS_METAS, PAYLOADS_STREAM
from bus._core.truncation import StringCutter
from bus._transport.objects import CHUNK_BYTES
from bus.testing import EventRecorder
from subscribers import Subscriber
from tests.conftest import StartWorker, hookbus_cmd, shipped_permissions
from tests.conftest import as_user as url
from tests.support.hooks_support import script, wait_for_file, write_hooks
from tests.support.waiting import wait_until

SUBJECT = "prx.lifecycle.tool_call"
MIB = 1024 * 1024
#: The shape of PRX's largest tool output (its own 1 MiB output cap), with text that is not one repeated byte.
BIG_OUTPUT = (hashlib.sha256(b"seed").hexdigest() * (MIB // 64 + 1))[:MIB]

DUMP = """
out="$OUT_DIR"
printf '%s' "$ZERO_HOOK_PAYLOAD" > "$out/env_payload"
printf '%s' "${ZERO_HOOK_PAYLOAD+set}" > "$out/env_payload_set"
printf '%s' "${ZERO_HOOK_PAYLOAD_TRUNCATED-unset}" > "$out/env_truncated"
cat "$ZERO_HOOK_PAYLOAD_FILE" > "$out/file_payload"
cat > "$out/stdin"
echo done > "$out/done"
"""


def big_payload(tag: str = "") -> dict[str, Any]:
    return {"tool": "shell", "success": True, "output": BIG_OUTPUT, "tag": tag}


def dump_hook(workspace: Path) -> Path:
    out = workspace / "out"
    out.mkdir()
    script(workspace, "dump.sh", DUMP)
    write_hooks(workspace, {"tool_call": [{"command": "./dump.sh", "stdin_json": True, "env": {"OUT_DIR": str(out)}}]})
    return out


async def received(bus: Bus, emit: Any, count: int = 1) -> list[Event]:
    """Subscribe, run ``emit()``, return the events as delivered."""
    recorder = EventRecorder()
    await bus.subscribe(SUBJECT, recorder)
    await emit()
    return await recorder.wait_for(count)


async def test_a_1_mib_payload_reaches_a_shell_hook_whole_through_file_and_stdin(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    await bus.port.ensure_payloads_bucket()
    out = dump_hook(workspace)
    await start_worker()
    payload = big_payload("hook")
    [event] = await received(bus, lambda: bus.emit(SUBJECT, payload, session_id="s1"))
    assert len(event.raw) <= DEFAULT_MAX_BYTES and event.truncated and event.payload_ref is not None
    assert event.payload_ref.bucket == PAYLOADS_BUCKET and event.payload_ref.size == len(orjson.dumps(payload))
    assert bus.stats.claimed == 1 and bus.stats.truncated == 0
    await wait_for_file(out / "done", timeout=30)
    for channel in ("file_payload", "stdin"):
        envelope = orjson.loads((out / channel).read_bytes())
        assert envelope["payload"] == payload, channel
        assert len(envelope["payload"]["output"]) == MIB
        assert "truncated" not in envelope and envelope["id"] == event.id and envelope["session_id"] == "s1"
    assert (out / "env_payload_set").read_text() == "set" and (out / "env_payload").read_text() == ""
    assert (out / "env_truncated").read_text() == "1"


async def test_zero_hook_payload_is_set_and_empty_with_the_truncated_flag_over_8_kib(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    out = dump_hook(workspace)
    await start_worker()
    [small] = await received(bus, lambda: bus.emit(SUBJECT, {"tool": "x"}))
    await wait_for_file(out / "done")
    assert (out / "env_payload").read_bytes() == small.raw
    assert (out / "env_truncated").read_text() == "unset"
    (out / "done").unlink()
    [large] = await received(bus, lambda: bus.emit(SUBJECT, {"tool": "x", "output": "y" * 9000}))
    await wait_for_file(out / "done")
    assert len(large.raw) > 8 * 1024 and large.payload_ref is None
    assert (out / "env_payload_set").read_text() == "set" and (out / "env_payload").read_text() == ""
    assert (out / "env_truncated").read_text() == "1"
    assert (out / "file_payload").read_bytes() == large.raw == (out / "stdin").read_bytes()


async def test_a_python_subscriber_gets_the_whole_payload_with_one_awaited_call(bus: Bus) -> None:
    await bus.port.ensure_payloads_bucket()
    app = Subscriber("claims")
    whole: list[dict[str, Any]] = []
    previews: list[Event] = []

    @app.on("tool_call")
    async def keep(event: Event, out: Bus) -> None:
        previews.append(event)
        whole.append(await event.full_payload())

    await app.start(bus)
    try:
        payload = big_payload("sdk")
        await bus.emit(SUBJECT, payload)
        await wait_until(lambda: whole, what="the subscriber's whole payload")
    finally:
        await app.stop()
    assert whole[0] == payload
    preview = previews[0].payload["output"]
    assert 60 * 1024 <= len(preview) < MIB and "bytes cut]" in preview, "the preview is cut to use the limit"


def claimed_envelope(ref: dict[str, Any], **fields: Any) -> bytes:
    return orjson.dumps(
        {
            "event": "tool_call",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "session_id": None,
            "payload": {"tool": "preview"},
            "id": "hostile",
            "depth": 0,
            "truncated": True,
            "payload_ref": ref,
            **fields,
        }
    )


async def test_hostile_references_are_refused_naming_what_is_wrong(bus: Bus) -> None:
    await bus.port.ensure_payloads_bucket()
    [good] = await received(bus, lambda: bus.emit(SUBJECT, big_payload("good")))
    assert good.payload_ref is not None
    real = orjson.loads(good.raw)["payload_ref"]
    other = hashlib.sha256(b"something else").hexdigest()
    hostile = [
        ({**real, "sha256": other}, r"has SHA-256 [0-9a-f]{16}…, the reference says"),
        ({**real, "size": real["size"] - 1}, r"is \d+ bytes, the reference says"),
        ({**real, "size": 10**12}, rf"size 1000000000000 bytes is over the {DEFAULT_MAX_OBJECT_BYTES}-byte cap"),
        ({**real, "bucket": "hookbus_modules"}, r"bucket 'hookbus_modules' refused"),
        ({**real, "name": other}, r"is not in hookbus_payloads"),
        ({**real, "name": "99999999"}, r"is not in hookbus_payloads"),
        ({**real, "name": str(int(real["name"]) - 1)}, r"is not a meta of hookbus_payloads"),  # its last chunk
    ]
    recorder = EventRecorder(lambda event: event.id == "hostile")
    await bus.subscribe(SUBJECT, recorder)
    for ref, _ in hostile:
        await bus.port.publish_raw(SUBJECT, claimed_envelope(ref))
    events = await recorder.wait_for(len(hostile))
    for event, (_, reason) in zip(events, hostile, strict=True):
        assert event.payload == {"tool": "preview"} and event.truncated
        with pytest.raises(PayloadRefError, match=reason):
            await event.full_payload()
    assert await good.full_payload() == big_payload("good")  # the genuine one is still whole


async def test_a_malformed_reference_drops_the_envelope_as_malformed(bus: Bus) -> None:
    recorder = EventRecorder()
    await bus.subscribe(SUBJECT, recorder)
    before = bus.stats.dropped["malformed"]
    bad = {"bucket": PAYLOADS_BUCKET, "name": "x", "size": 1, "sha256": "not hex"}
    await bus.port.publish_raw(SUBJECT, claimed_envelope(bad))
    await bus.port.publish_raw(SUBJECT, claimed_envelope(bad, payload_ref="a string"))
    await bus.emit(SUBJECT, {"barrier": True})
    [event] = await recorder.wait_for(1)
    assert event.payload == {"barrier": True}
    assert bus.stats.dropped["malformed"] == before + 2
    with pytest.raises(EnvelopeError, match=r"field 'payload_ref': field 'sha256': expected `str` matching"):
        decode_event(SUBJECT, claimed_envelope(bad))


async def test_without_an_object_store_the_largest_strings_are_cut_in_proportion(own_server: NatsServer) -> None:
    """No hookbus_payloads bucket on this server: a 1 MiB output keeps over 60 KiB, the envelope uses the limit."""
    medium, small = "m" * 10_000, "keep me"
    async with Bus(own_server.url, name="no-store") as bus:
        payload = {"tool": "shell", "output": BIG_OUTPUT, "stderr": medium, "note": small}
        [event] = await received(bus, lambda: bus.emit(SUBJECT, payload))
        assert bus.stats.truncated == 1 and bus.stats.claimed == 0
    assert event.truncated and event.payload_ref is None
    assert DEFAULT_MAX_BYTES - 512 <= len(event.raw) <= DEFAULT_MAX_BYTES, "the envelope uses the limit"
    output, stderr = event.payload["output"], event.payload["stderr"]
    assert len(output) >= 60 * 1024 and output.startswith(BIG_OUTPUT[:1000]) and output.endswith(BIG_OUTPUT[-1000:])
    assert event.payload["note"] == small
    cut = int(re.search(r"\[hookbus: (\d+) bytes cut\]", output).group(1))  # type: ignore[union-attr]
    marker = re.search(r"…\[hookbus: \d+ bytes cut\]…", output).group(0)  # type: ignore[union-attr]
    assert len(output.encode()) - len(marker.encode()) + cut == MIB
    assert len(stderr) < len(medium), "the second largest string gives its share too"
    assert await event.full_payload() is event.payload, "nothing to fetch: the payload is all there is"


async def test_past_the_object_cap_the_payload_is_cut_to_fit(nats_url: str) -> None:
    async with Bus(nats_url, name="small-cap", max_object_bytes=512 * 1024) as bus:
        await bus.port.ensure_payloads_bucket()
        [event] = await received(bus, lambda: bus.emit(SUBJECT, big_payload("cap")))
        assert bus.stats.truncated == 1 and bus.stats.claimed == 0
    assert event.truncated and event.payload_ref is None and len(event.payload["output"]) >= 60 * 1024


def test_strings_are_cut_in_proportion_to_their_sizes() -> None:
    value = {"a": "a" * 1_000_000, "b": "b" * 100_000, "short": "s" * 64}
    cutter = StringCutter(value)
    assert cutter.cut(900_000)
    kept_a, kept_b = len(value["a"]), len(value["b"])
    assert 9.5 <= kept_a / kept_b <= 10.5, (kept_a, kept_b)
    assert value["short"] == "s" * 64
    assert 190_000 <= len(orjson.dumps(value)) <= 210_000
    assert not StringCutter({"n": list(range(100))}).cut(10)


def test_an_oversized_event_with_nothing_to_cut_is_refused_or_previewed_empty() -> None:
    encoder = Encoder(max_bytes=1024)
    many = {f"k{i}": i for i in range(500)}
    data, oversize = Encoder(max_bytes=1024, cut=False).encode(SUBJECT, many, None, 0)
    assert oversize and len(data) > 1024
    ref = reference(orjson.dumps(many))
    claimed = decode_event(SUBJECT, encoder.fit(SUBJECT, many, None, 0, len(data), ref), max_bytes=1024)
    assert claimed.payload == {} and claimed.payload_ref == ref and claimed.truncated


async def test_tail_full_prints_the_whole_payload(nats_url: str, bus: Bus) -> None:
    await bus.port.ensure_payloads_bucket()
    tail = subprocess.Popen(
        [*hookbus_cmd(), "tail", SUBJECT, "--full", "--json", "--count", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "NATS_URL": nats_url},
    )
    try:
        assert tail.stderr is not None
        await asyncio.to_thread(tail.stderr.readline)  # "tailing ...": subscribed
        payload = big_payload("tail")
        await bus.emit(SUBJECT, payload)
        out, err = await asyncio.to_thread(tail.communicate, timeout=60)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate(timeout=20)
    envelope = orjson.loads(out.splitlines()[0])
    assert envelope["payload"] == payload and "truncated" not in envelope, err


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(config_file=shipped_permissions(tmp_path), jetstream=False) as server:
        yield server


async def _raw(server: NatsServer, user: str) -> Client:
    nc = Client()

    async def quiet(exc: Exception) -> None:
        return None

    await nc.connect(
        url(server, user), inbox_prefix=f"_INBOX.{user}".encode(), error_cb=quiet, max_reconnect_attempts=0
    )
    return nc


async def test_on_the_shipped_permissions_an_agent_cannot_purge_or_replace_anothers_payload(
    shipped: NatsServer,
) -> None:
    """eva's payload is put and read under the shipped grants; bob may not purge the bucket nor put on eva's
    subjects, and a meta of his naming eva's chunks, or a reference to his own forgery with eva's size, is
    refused by the reader, never taken for eva's."""
    async with Bus(url(shipped, "bus")) as bus_role:
        await bus_role.port.ensure_payloads_bucket()
    payload = big_payload("eva")
    async with Bus(url(shipped, "agent-eva"), name="eva") as eva, Bus(url(shipped, "worker"), name="w") as worker:
        recorder = EventRecorder()
        await worker.subscribe(SUBJECT, recorder)
        await eva.emit(SUBJECT, payload)
        [event] = await recorder.wait_for(1)
        assert eva.stats.claimed == 1 and event.payload_ref is not None
        assert await event.full_payload() == payload
        ref = event.payload_ref
        bob = await _raw(shipped, "agent-bob")
        try:
            js = bob.jetstream(timeout=2)
            with pytest.raises(nats_errors.TimeoutError):  # denied: the server drops it, no reply comes
                await js.purge_stream(PAYLOADS_STREAM)
            with pytest.raises(nats_errors.TimeoutError):  # eva's chunks subject: not his to put on
                await js.publish(f"{PAYLOADS_CHUNKS}.agent-eva", b"x")
            eva_meta = await worker.port.nc.jetstream().get_msg(PAYLOADS_STREAM, seq=int(ref.name), direct=True)
            stolen = await js.publish(f"{PAYLOADS_METAS}.agent-bob", eva_meta.data)  # eva's chunks, his meta
            forged = orjson.dumps({**payload, "tag": "bob"})[: ref.size].ljust(ref.size, b" ")
            seqs = [
                (await js.publish(f"{PAYLOADS_CHUNKS}.agent-bob", forged[start : start + CHUNK_BYTES])).seq
                for start in range(0, len(forged), CHUNK_BYTES)
            ]
            meta = orjson.loads(eva_meta.data)
            own = await js.publish(f"{PAYLOADS_METAS}.agent-bob", orjson.dumps({**meta, "chunks": seqs}))
        finally:
            await bob.close()
        for name, reason in ((stolen.seq, "a chunk is not its publisher's"), (own.seq, "has SHA-256")):
            envelope = orjson.loads(event.raw)
            envelope["payload_ref"]["name"] = str(name)
            count = len(recorder.events) + 1
            await worker.port.publish_raw(SUBJECT, orjson.dumps(envelope))
            again = (await recorder.wait_for(count))[-1]
            with pytest.raises(PayloadRefError, match=reason):
                await again.full_payload()


def _b64(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()
