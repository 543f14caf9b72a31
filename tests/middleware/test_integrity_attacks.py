"""Erasing or crowding out what others put, as the other NATS user on deploy/nats/permissions.conf.

JetStream's ``Nats-Rollup`` header purges a whole stream (``all``) or a
subject (``sub``), and subject permissions cannot forbid a header: a writer
allowed one key of a bucket could erase every other key of it. hookbus makes
every bucket and stream refuse rollups and purges, and the claim check's
store keeps a quota per publisher. Each attack below runs as the attacker's
own user, against state the bus role made as ``hookbus up`` does.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import nats.errors
import nats.js.errors
import orjson
import pytest
from nats.aio.client import Client

from bus import Bus, Cancel, Continue, Module, NatsServer, Stage
from bus._core.errors import MiddlewareError
from bus._core.subjects import (
    GUARDS_BUCKET,
    PAYLOADS_CHUNKS,
    PAYLOADS_METAS,
    PAYLOADS_STREAM,
    PRESENCE_BUCKET,
    RECORDS_APPROVED_BUCKET,
    RECORDS_BUCKET,
    TRUST_BUCKET,
)
from bus._journal.entries import ensure_journal_stream
from bus._middleware.guards import GuardRecord
from bus._middleware.kernel.view import View
from bus._middleware.registry import MAX_HANDLERS, MODULES_BUCKET, ensure_buckets
from bus._middleware.trust import Managed
from bus._presence import MAX_AGE_S as PRESENCE_MAX_AGE_S
from bus._presence import component, presence
from bus._transport.objects import CHUNK_BYTES, PUBLISHER_MESSAGES, ensure_payloads_bucket
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.conftest import as_user as url
from tests.conftest import connect_as as raw
from tests.conftest import shipped_server
from tests.middleware.test_attacks import RM, guard_module
from tests.support.waiting import wait_until

SUBJECT = "prx.lifecycle.tool_call"
ROLLUP_ALL = {"Nats-Rollup": "all"}
#: Every KV bucket hookbus creates.
ALL_BUCKETS = (
    MODULES_BUCKET,
    TRUST_BUCKET,
    GUARDS_BUCKET,
    RECORDS_BUCKET,
    RECORDS_APPROVED_BUCKET,
    PRESENCE_BUCKET,
)


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "integrity")


async def hookbus_up_state(server: NatsServer) -> None:
    """What ``hookbus up`` makes, as the bus role."""
    async with Bus(url(server, "bus")) as bus_role:
        await ensure_buckets(bus_role.port, (PRESENCE_BUCKET, PRESENCE_MAX_AGE_S))


async def rollup(nc: Client, subject: str) -> str:
    """Publish ``{}`` on ``subject`` with ``Nats-Rollup: all``; what the server said."""
    try:
        ack = await nc.jetstream(timeout=3).publish(subject, b"{}", headers=ROLLUP_ALL)
    except (nats.js.errors.Error, nats.errors.Error) as exc:
        return f"refused: {exc!r}"
    return f"stored as {ack.seq}"


async def stream_messages(nc: Client, stream: str) -> int:
    return int((await nc.jetstream().stream_info(stream)).state.messages)


async def test_a_module_cannot_erase_another_modules_guard_record_with_a_rollup(server: NatsServer) -> None:
    """module-audit puts on its own guards key with ``Nats-Rollup: all``: refused, the guard record of
    module-guard stays, and a kernel started afterwards still cancels ``rm -rf /`` (the guard is gone)."""
    await hookbus_up_state(server)
    guard = serving(guard_module(), url(server, "module-guard"))
    async with guard, Bus(url(server, "agent-eva"), managed=["guard.no_rm"]) as eva:
        await wait_for_chain(eva, "tool.call", ["guard.no_rm"])
    async with raw(server, "module-audit") as audit:
        said = await rollup(audit, f"$KV.{GUARDS_BUCKET}.audit.x")
        said_modules = await rollup(audit, f"$KV.{MODULES_BUCKET}.audit.x")
    assert said.startswith("refused"), said
    assert said_modules.startswith("refused"), said_modules
    async with raw(server, "operator") as op:
        assert await stream_messages(op, f"KV_{GUARDS_BUCKET}") == 1  # module-guard's record, nothing else
    async with Bus(url(server, "agent-eva"), managed=["guard.no_rm"]) as late:
        await late.middleware.start()
        decision = await late.intercept(Stage.TOOL_CALL, RM)
    assert isinstance(decision, Cancel) and "guard.no_rm" in (decision.handler or ""), decision


async def test_an_agent_cannot_erase_others_presence_with_a_rollup(server: NatsServer) -> None:
    await hookbus_up_state(server)
    eva = Bus(url(server, "agent-eva"), name="eva")
    async with eva, raw(server, "operator") as op, presence(eva, "eva", [component("agent", "eva")]):
        await wait_until(lambda: stream_messages(op, f"KV_{PRESENCE_BUCKET}"), what="eva's presence record")
        async with raw(server, "agent-bob") as bob:
            said = await rollup(bob, f"$KV.{PRESENCE_BUCKET}.agent-bob.x")
        assert said.startswith("refused"), said
        assert await stream_messages(op, f"KV_{PRESENCE_BUCKET}") == 1


async def test_an_agent_cannot_erase_the_journal_with_a_rollup(server: NatsServer) -> None:
    async with Bus(url(server, "bus")) as bus_role:
        await ensure_journal_stream(bus_role.port)
    async with raw(server, "agent-eva") as eva:
        said = await rollup(eva, "hookbus.journal.middleware.agent-eva")
    assert said.startswith("refused"), said


async def claimed_by_eva(server: NatsServer, worker: Bus, recorder: EventRecorder, tag: str) -> Any:
    """eva emits a 1 MiB payload; the event the worker got (claimed or cut)."""
    before = len(recorder.events)
    async with Bus(url(server, "agent-eva"), name="eva") as eva:
        await eva.emit(SUBJECT, {"output": (hashlib.sha256(tag.encode()).hexdigest() * 16384), "tag": tag})
    events = await recorder.wait_for(before + 1)
    return events[-1]


async def test_an_agent_cannot_erase_anothers_claimed_payload_with_a_rollup(server: NatsServer) -> None:
    await hookbus_up_state(server)
    async with Bus(url(server, "worker"), name="w") as worker:
        recorder = EventRecorder()
        await worker.subscribe(SUBJECT, recorder)
        event = await claimed_by_eva(server, worker, recorder, "eva")
        assert event.payload_ref is not None
        async with raw(server, "agent-bob") as bob:
            said = await rollup(bob, f"{PAYLOADS_CHUNKS}.agent-bob")
            said_meta = await rollup(bob, f"{PAYLOADS_METAS}.agent-bob")
        assert said.startswith("refused") and said_meta.startswith("refused"), (said, said_meta)
        assert (await event.full_payload())["tag"] == "eva"


async def test_an_agent_flooding_the_claim_check_evicts_only_its_own_objects(server: NatsServer) -> None:
    """bob puts far more than his quota in chunks on his own subject: the store keeps his newest
    PUBLISHER_MESSAGES only, so eva's big payload is still kept whole and read back, never cut."""
    async with Bus(url(server, "bus")) as bus_role:
        await ensure_buckets(bus_role.port)
    quota = PUBLISHER_MESSAGES * CHUNK_BYTES
    async with raw(server, "operator") as op:
        await op.jetstream().delete_stream(PAYLOADS_STREAM)
    async with raw(server, "bus") as nc:  # 1.5 quotas: what bob may put alone is not the whole store
        await ensure_payloads_bucket(nc, max_bytes=quota * 3 // 2)
    async with raw(server, "agent-bob") as bob:
        js = bob.jetstream(timeout=10)
        chunk = b"b" * CHUNK_BYTES
        refused = 0
        for _ in range(PUBLISHER_MESSAGES * 2 // 32):  # twice his quota, 32 chunks in flight at a time
            acks = await asyncio.gather(
                *(js.publish(f"{PAYLOADS_CHUNKS}.agent-bob", chunk) for _chunk in range(32)), return_exceptions=True
            )
            refused += sum(isinstance(ack, BaseException) for ack in acks)
        too_big = await asyncio.gather(
            js.publish(f"{PAYLOADS_CHUNKS}.agent-bob", b"b" * 900_000), return_exceptions=True
        )
    assert refused == 0  # his own oldest went, nobody else's room
    assert isinstance(too_big[0], BaseException)  # no message bigger than a chunk
    async with raw(server, "operator") as op:
        info = await op.jetstream().stream_info(PAYLOADS_STREAM, subjects_filter=">")
        assert (info.state.subjects or {}).get(f"{PAYLOADS_CHUNKS}.agent-bob") == PUBLISHER_MESSAGES
    async with Bus(url(server, "worker"), name="w") as worker:
        recorder = EventRecorder()
        await worker.subscribe(SUBJECT, recorder)
        event = await claimed_by_eva(server, worker, recorder, "eva")
        assert event.payload_ref is not None  # kept whole, not only cut to a preview
        assert (await event.full_payload())["tag"] == "eva"


async def test_hookbus_up_hardens_buckets_an_older_version_made(server: NatsServer) -> None:
    """Buckets made with nats-py's defaults (rollup allowed, purge not denied), as hookbus did before:
    the bus role's start brings them to refusing both, and a rollup is then refused."""
    async with raw(server, "operator") as op:
        js = op.jetstream()
        for bucket in (GUARDS_BUCKET, MODULES_BUCKET):
            await js.create_key_value(bucket=bucket, history=1)
        await js.create_object_store("hookbus_payloads")
        assert (await js.stream_info(f"KV_{GUARDS_BUCKET}")).config.allow_rollup_hdrs
    await hookbus_up_state(server)
    async with raw(server, "operator") as op:
        js = op.jetstream()
        streams = [info.config.name for info in await js.streams_info()]
        assert set(streams) == {f"KV_{bucket}" for bucket in ALL_BUCKETS} | {PAYLOADS_STREAM}, streams
        for stream in streams:  # the two made as before, and every other one hookbus up makes
            config = (await js.stream_info(stream)).config
            assert not config.allow_rollup_hdrs and config.deny_purge, stream
    async with raw(server, "module-audit") as audit:
        assert (await rollup(audit, f"$KV.{GUARDS_BUCKET}.audit.x")).startswith("refused")


def announcement_of_many(module: str, instance: str, count: int, first: int = 0, code: str = "") -> bytes:
    """An announcement of ``count`` fail-open handlers on tool.call (what a hostile module may put on its key)."""
    handlers = [
        {"module": module, "name": f"h{i}", "stage": "tool.call", "code": code} for i in range(first, first + count)
    ]
    return orjson.dumps(
        {"module": module, "instance": instance, "heartbeat": 60.0, "handlers": handlers, "at": time.time()}
    )


async def test_an_announcement_over_the_handler_cap_is_refused_whole_and_said_once(
    server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """module-audit announces 1,200 handlers on its own key, beat after beat, then 200 other ones on each of two
    instances: the kernel refuses the 1,200 whole (logged once), and the second instance of 200 (its
    module over the cap), while a new version of a's 200 (a rolling deploy) is taken; the guard's chain
    is what it was and ``rm -rf /`` still cancelled."""
    await hookbus_up_state(server)
    guard = serving(guard_module(), url(server, "module-guard"))
    async with guard, Bus(url(server, "agent-eva"), managed=["guard.no_rm"]) as eva:
        await wait_for_chain(eva, "tool.call", ["guard.no_rm"])
        view = await eva.middleware.start()
        async with raw(server, "module-audit") as audit:
            kv = await audit.jetstream().key_value(MODULES_BUCKET)
            with caplog.at_level(logging.ERROR, logger="hookbus.middleware"):
                for _ in range(3):  # heartbeats of the same over-cap announcement
                    await kv.put("audit.big", announcement_of_many("audit", "big", 1200))
                await kv.put("audit.a", announcement_of_many("audit", "a", 200))
                await kv.put("audit.b", announcement_of_many("audit", "b", 200, first=200))
                await view.wait_until(lambda: "audit.a" in view.instances, 10)
                await wait_until(
                    lambda: sum("entry audit.b refused" in r.getMessage() for r in caplog.records), what="b refused"
                )
                await kv.put("audit.c", announcement_of_many("audit", "c", 200, code="v2"))  # a rolling deploy of a
                await view.wait_until(lambda: "audit.c" in view.instances, 10)  # new version: taken next to a
        refused = [r.getMessage() for r in caplog.records if "entry audit.big refused" in r.getMessage()]
        assert len(refused) == 1 and "1200 handlers, over the cap of 256" in refused[0], refused
        assert "audit.big" not in view.instances and "audit.b" not in view.instances
        waiting = view.chains["tool.call"].waiting
        assert len(waiting) == 200  # audit.a's, unapproved: visible, never called
        decision = await eva.intercept(Stage.TOOL_CALL, RM)
        assert isinstance(decision, Cancel), decision


def test_a_module_over_the_handler_cap_refuses_to_serve() -> None:
    big = Module("big")
    for i in range(MAX_HANDLERS + 1):

        async def handler(stage: str, payload: dict[str, Any]) -> Continue:
            return Continue()

        handler.__name__ = f"h{i}"
        big.stage(Stage.TOOL_CALL, name=f"h{i}")(handler)
    with pytest.raises(MiddlewareError, match="over the cap of 256"):
        asyncio.run(big.serve("nats://127.0.0.1:1"))


async def test_a_kernel_keeps_a_guard_record_that_vanishes_without_a_delete() -> None:
    """The view as its guards watch feeds it: a record gone by a purge (or missing from a restarted watch,
    both revision 0) still holds its stage; only a delete marker on its key (its module's or the
    operator's ``hookbus detach``) ends it."""
    decl = guard_module().declarations[0]
    record = GuardRecord(decl, decl.identity(), time.time(), time.time())
    view = View(None, managed=Managed(frozenset({decl.qualname})), trust_new=False, aliases={})  # type: ignore[arg-type]
    view._started = True  # fed directly, as the watch would

    def holds() -> bool:
        chain = view.chains.get("tool.call")
        return chain is not None and [link.decl.qualname for link in chain.holds] == [decl.qualname]

    view._on_guard(record.key, record.to_bytes(), 1)
    assert holds()
    view._on_guard(record.key, None, 0)  # purged: no delete marker
    assert holds() and record.key in view.guards
    view._on_guard(record.key, None, 2)  # the delete marker of a detach
    assert not holds() and record.key not in view.guards
