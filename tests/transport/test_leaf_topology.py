"""deploy/nats/topology: a hub and two leaf nodes, each leaf in a JetStream domain of its own with
mirrors of the hub's buckets, started from the shipped files (ports and stores templated). Asks, the
budgets' books, the claim check and the journal used from a leaf are the hub's, with no copy on a leaf."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest

from bus import Ask, Bus, Cancel, Continue, Event, Module, NatsServer, Stage
from bus._core.subjects import (
    ASKS_BUCKET,
    BUDGET_BUCKETS,
    BUDGET_MAX_AGE_S,
    MODULES_BUCKET,
    PAYLOADS_METAS,
    PAYLOADS_STREAM,
    PRESENCE_BUCKET,
    RULES_BUCKET,
    kv_stream,
)
from bus._journal.entries import decode_entry, ensure_journal_stream
from bus._journal.subjects import JOURNAL_PREFIX, JOURNAL_STREAM
from bus._middleware.asks.store import AskStore, ensure_asks_bucket
from bus._middleware.registry import request_subject
from bus._presence import MAX_AGE_S
from bus._transport.kv_mirror import DOMAIN_ENV, MIRRORED
from bus._transport.streams import StreamState, ack
from bus.testing import serving, wait_for_chain
from subscribers import Subscriber
from tests.conftest import as_user, run_cli, unique
from tests.support.asks_support import pending_ask
from tests.support.waiting import wait_until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "nats"
RM = {"name": "shell", "input": {"command": "rm -rf /"}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Topology:
    hub: NatsServer
    leaf_a: NatsServer
    leaf_b: NatsServer


def templated(folder: Path, leaf_port: int) -> Path:
    """The shipped permissions and topology files under ``folder``: loopback ports, stores in ``folder``."""
    (folder / "topology").mkdir()
    permissions = (DEPLOY / "permissions.conf").read_text()
    (folder / "permissions.conf").write_text(permissions.replace("0.0.0.0:8222", "127.0.0.1:0"))
    for name in ("hub", "leaf-a", "leaf-b"):
        text = (DEPLOY / "topology" / f"{name}.conf").read_text()
        link = "0.0.0.0:7422" if name == "hub" else "@hub:7422"
        for shipped in ("/data/jetstream", "0.0.0.0:8222", link):
            assert shipped in text, f"{name}.conf changed shape: no {shipped}"
        text = text.replace("/data/jetstream", str(folder / name / "jetstream")).replace("0.0.0.0:8222", "127.0.0.1:0")
        text = text.replace("0.0.0.0:7422", f"127.0.0.1:{leaf_port}").replace("@hub:7422", f"@127.0.0.1:{leaf_port}")
        (folder / "topology" / f"{name}.conf").write_text(text)
    return folder / "topology"


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    files = templated(tmp_path_factory.mktemp("topology"), free_port())
    with (
        NatsServer(config_file=files / "hub.conf", jetstream=False) as hub,
        NatsServer(config_file=files / "leaf-a.conf", jetstream=False) as leaf_a,
        NatsServer(config_file=files / "leaf-b.conf", jetstream=False) as leaf_b,
    ):
        yield Topology(hub, leaf_a, leaf_b)


async def linked(server: NatsServer) -> None:
    """Wait until ``server`` (a leaf) reaches the hub's JetStream over its leaf node link."""
    nc = await nats.connect(as_user(server, "operator"))
    try:

        async def reaches_hub() -> bool:
            try:
                return (await nc.jetstream(domain="hub").account_info()).domain == "hub"
            except (nats.errors.Error, TimeoutError):
                return False

        await wait_until(reaches_hub, what=f"{server.url} linked to the hub")
        assert (await nc.jetstream().account_info()).domain in ("leaf-a", "leaf-b")
    finally:
        await nc.close()


async def _buckets_on_the_hub(topology: Topology) -> None:
    async with Bus(as_user(topology.hub, "operator")) as op:
        await op.middleware.start()
        await op.port.ensure_bucket(RULES_BUCKET)
        await op.port.ensure_bucket(PRESENCE_BUCKET, MAX_AGE_S)
    for leaf in (topology.leaf_a, topology.leaf_b):
        await linked(leaf)


@pytest.fixture(scope="module")
def mirrored(topology: Topology) -> Topology:
    """`hookbus up`'s buckets on the hub (as the operator), then `hookbus mirror --from hub` on each leaf."""
    asyncio.run(_buckets_on_the_hub(topology))
    for leaf in (topology.leaf_a, topology.leaf_b):
        done = run_cli("mirror", "--from", "hub", "--nats-url", as_user(leaf, "operator"))
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("mirrored from hub") == len(MIRRORED), done.stdout
        again = run_cli("mirror", "--from", "hub", "--nats-url", as_user(leaf, "operator"))
        assert again.returncode == 0 and again.stdout.count("already a mirror") == len(MIRRORED), again.stdout
    return topology


def guard_module() -> Module:
    guard = Module("guard")

    @guard.stage(Stage.TOOL_CALL, fail_closed=True)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
        return Cancel("only by hand") if "rm" in payload["input"]["command"] else Continue()

    return guard


async def answered_from(server: NatsServer, subject: str) -> None:
    """Wait until a request on ``subject`` from ``server`` finds a responder: the module's interest crossed
    the hub to this leaf (its announcement may arrive through the mirror before that)."""
    nc = await nats.connect(as_user(server, "operator"))

    async def found() -> bool:
        try:
            await nc.request(subject, b"{}", timeout=1)
        except nats.errors.NoRespondersError:
            return False
        except nats.errors.TimeoutError:
            pass  # someone is there, and took its time over a request it cannot read
        return True

    try:
        await wait_until(found, what=f"a responder on {subject} seen from {server.url}")
    finally:
        await nc.close()


async def stored_keys(server: NatsServer, domain: str | None, bucket: str) -> set[str]:
    nc = await nats.connect(as_user(server, "operator"))
    try:
        js = nc.jetstream(domain=domain)
        info = await js.stream_info(kv_stream(bucket), subjects_filter=">")
        return set(info.state.subjects or {})
    finally:
        await nc.close()


async def test_a_module_on_one_leaf_serves_an_agent_on_the_other_through_local_mirrors(
    mirrored: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DOMAIN_ENV, "hub")
    async with (
        serving(guard_module(), as_user(mirrored.leaf_b, "module-guard")),
        Bus(as_user(mirrored.leaf_a, "agent-eva"), managed=["guard.no_rm"]) as eva,
    ):
        await wait_for_chain(eva, "tool.call", ["guard.no_rm"])
        view = await eva.middleware.start()
        guard = next(ann for ann, _ in view.instances.values() if ann.module == "guard")
        await answered_from(mirrored.leaf_a, request_subject(guard))
        assert all(bucket.cross_domain for bucket in (view._modules_kv, view._trust_kv, view.guards_kv))
        decision = await eva.intercept(Stage.TOOL_CALL, RM)
        assert decision == Cancel("only by hand", "guard.no_rm")
        ok = await eva.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "ls"}})
        assert isinstance(ok, Continue)
    # The announcement went through the hub: the hub's bucket has it, and each leaf's copy too.
    announced = "$KV.hookbus_modules.guard."
    hub_keys = await stored_keys(mirrored.hub, None, MODULES_BUCKET)
    assert any(key.startswith(announced) for key in hub_keys), hub_keys

    async def copied(leaf: NatsServer) -> bool:
        return any(key.startswith(announced) for key in await stored_keys(leaf, None, MODULES_BUCKET))

    for leaf in (mirrored.leaf_a, mirrored.leaf_b):
        await wait_until(lambda leaf=leaf: copied(leaf), what=f"the announcement in {leaf.url}'s mirror")


class Refusals:
    """A raw connection as ``user`` that records the server's permission refusals."""

    def __init__(self) -> None:
        self.denied: list[str] = []

    async def connect(self, server: NatsServer, user: str) -> Any:
        async def error(exc: Exception) -> None:
            if "permissions violation" in str(exc).lower():
                self.denied.append(str(exc))

        return await nats.connect(
            as_user(server, user), error_cb=error, allow_reconnect=False, inbox_prefix=f"_INBOX.{user}"
        )


async def test_a_module_on_a_leaf_cannot_announce_as_another_through_the_hub_prefix(mirrored: Topology) -> None:
    refusals = Refusals()
    nc = await refusals.connect(mirrored.leaf_b, "module-audit")
    try:
        forged = "$JS.hub.API.$KV.hookbus_modules.guard.forged"
        with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
            await nc.request(forged, b'{"forged": true}', timeout=1)
        await nc.flush()
        await wait_until(lambda: refusals.denied, what="the refusal of the forged announcement")
        assert forged.lower() in refusals.denied[0].lower()
    finally:
        await nc.close()
    assert not any(key.endswith(".guard.forged") for key in await stored_keys(mirrored.hub, None, MODULES_BUCKET))


async def test_an_agent_on_a_leaf_cannot_shadow_a_bucket_in_the_leafs_domain(mirrored: Topology) -> None:
    refusals = Refusals()
    nc = await refusals.connect(mirrored.leaf_a, "agent-eva")
    try:
        with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
            await nc.request("$JS.API.STREAM.CREATE.KV_hookbus_shadow", b'{"name": "KV_hookbus_shadow"}', timeout=1)
        await wait_until(lambda: refusals.denied, what="the refusal of the stream create")
    finally:
        await nc.close()


async def test_a_bucket_with_no_mirror_on_a_leaf_is_bound_at_the_hub_never_made_locally(
    mirrored: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even as the operator (who may create streams anywhere): with HOOKBUS_KV_DOMAIN naming the hub, a bucket
    missing from the leaf is the hub's, read and written across the link, never a second one on the leaf."""
    async with Bus(as_user(mirrored.hub, "operator")) as op:
        await op.port.ensure_bucket("hookbus_unmirrored")
    monkeypatch.setenv(DOMAIN_ENV, "hub")
    async with Bus(as_user(mirrored.leaf_a, "operator")) as op:
        bucket = await op.port.open_bucket("hookbus_unmirrored")
        assert bucket.cross_domain
        await bucket.put("k", b"v")
        assert await bucket.create("k", b"again") is False
        await bucket.delete("k")
        assert await bucket.create("k", b"after-delete") is True
        with pytest.raises(Exception, match="not found"):
            await op.port.nc.jetstream().stream_info(kv_stream("hookbus_unmirrored"))
    async with Bus(as_user(mirrored.hub, "operator")) as op:
        entry = await (await op.port.open_bucket("hookbus_unmirrored")).get("k")
        assert entry is not None and entry.value == b"after-delete"


async def test_a_server_without_the_leaf_password_is_refused_as_a_leaf(mirrored: Topology, tmp_path: Path) -> None:
    hub_conf = (mirrored.hub.config_file or Path()).read_text()
    port = hub_conf.split("listen: 127.0.0.1:")[-1].split()[0]
    rogue = tmp_path / "rogue.conf"
    rogue.write_text(f'leafnodes {{ remotes: [ {{ url: "nats-leaf://leaf:guessed@127.0.0.1:{port}" }} ] }}\n')
    with NatsServer(config_file=rogue, jetstream=False):

        def refused() -> bool:
            return "authentication error" in mirrored.hub.log_path.read_text(errors="replace").lower()

        await wait_until(refused, what="the hub refusing the rogue leaf")


async def own_streams(server: NatsServer) -> set[str]:
    """The streams in ``server``'s own JetStream domain (a leaf's: its mirrors, and nothing else of hookbus's)."""
    nc = await nats.connect(as_user(server, "operator"))
    try:
        return {info.config.name for info in await nc.jetstream().streams_info()}
    finally:
        await nc.close()


def asking_module() -> Module:
    guard = Module("guard")

    @guard.stage(Stage.TOOL_CALL, fail_closed=True)
    async def hold(stage: str, payload: dict[str, Any]) -> Ask:
        return Ask("a person decides", timeout=60)

    return guard


async def _hub_state(hub: NatsServer) -> StreamState:
    """What `hookbus up` makes on the hub for asks, budgets, the claim check and the journal (as the operator)."""
    async with Bus(as_user(hub, "operator")) as op:
        await ensure_asks_bucket(op.port)
        await op.port.counter_bucket(BUDGET_BUCKETS["user"], BUDGET_MAX_AGE_S).ensure()
        await op.port.ensure_payloads_bucket()
        return await ensure_journal_stream(op.port)


async def test_an_ask_raised_on_one_leaf_is_answered_from_the_other_and_kept_only_at_the_hub(
    mirrored: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await _hub_state(mirrored.hub)
    monkeypatch.setenv(DOMAIN_ENV, "hub")
    session = unique("leaf")
    async with (
        serving(asking_module(), as_user(mirrored.leaf_b, "module-guard")),
        Bus(as_user(mirrored.leaf_a, "agent-eva"), managed=["guard.hold"]) as eva,
        Bus(as_user(mirrored.leaf_b, "operator")) as op,
    ):
        await wait_for_chain(eva, "tool.call", ["guard.hold"])
        view = await eva.middleware.start()
        guard = next(ann for ann, _ in view.instances.values() if ann.module == "guard")
        await answered_from(mirrored.leaf_a, request_subject(guard))
        call = asyncio.create_task(eva.intercept(Stage.TOOL_CALL, RM, {"session": session}))
        operator = AskStore(op.port)
        item = await pending_ask(operator, session)
        assert item.ask.user == "agent-eva" and not call.done()
        await operator.answer(item.ask.id, "deny", "alice", item.ask.payload_sha256, reason="not from here")
        assert await call == Cancel("denied by alice: not from here", "guard.hold")
        # the budgets' books and the journal seen from a leaf are the hub's too
        books = eva.port.counter_bucket(BUDGET_BUCKETS["user"], BUDGET_MAX_AGE_S)
        assert await books.add(f"d1.{session}.agent-eva", 3) == 3
        bob_books = op.port.counter_bucket(BUDGET_BUCKETS["user"], BUDGET_MAX_AGE_S)
        assert await bob_books.total(f"d1.{session}.*") == {f"d1.{session}.agent-eva": 3}
        seen = await op.port.stream_state(JOURNAL_STREAM)
        assert seen is not None and (seen.name, seen.created) == (JOURNAL_STREAM, journal.created)
        await read_the_ask_from_the_journal(op, session)
    kept = await stored_keys(mirrored.hub, None, ASKS_BUCKET)
    for kind in ("ask", "answer"):
        assert f"$KV.{ASKS_BUCKET}.{kind}.agent-eva.{item.ask.id}" in kept, kept

    async def finished() -> bool:
        return f"$KV.{ASKS_BUCKET}.done.agent-eva.{item.ask.id}" in await stored_keys(mirrored.hub, None, ASKS_BUCKET)

    await wait_until(finished, what="the ask marked done at the hub")
    for leaf in (mirrored.leaf_a, mirrored.leaf_b):
        assert await own_streams(leaf) == {kv_stream(name) for name in MIRRORED}, leaf.url
    # across the link an agent still reads only its own user's asks
    refusals = Refusals()
    nc = await refusals.connect(mirrored.leaf_a, "agent-bob")
    try:
        theirs = f"$JS.hub.API.DIRECT.GET.{kv_stream(ASKS_BUCKET)}.$KV.{ASKS_BUCKET}.ask.agent-eva.{item.ask.id}"
        with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
            await nc.request(theirs, b"", timeout=1)
        await wait_until(lambda: refusals.denied, what="the refusal of another agent's ask")
    finally:
        await nc.close()


async def read_the_ask_from_the_journal(bus: Bus, session: str) -> None:
    """Consume the hub's journal stream from ``bus`` (on a leaf) as a sink does, until the ask's entry comes."""
    sink = await bus.port.pull_consumer(
        JOURNAL_STREAM, f"{JOURNAL_PREFIX}.>", unique("sink"), ack_wait_s=30, max_ack_pending=64
    )
    asked: list[str] = []

    async def journaled() -> bool:
        for message in await sink.fetch(64, 1.0):
            entry = decode_entry(message.data, message.subject)
            assert await ack(message)
            if entry.session == session and entry.decision == "asked":
                asked.append(entry.cause or "")
        return bool(asked)

    try:
        await wait_until(journaled, what="the ask's journal entry consumed on a leaf")
    finally:
        await sink.close()
    assert "a person decides" in asked[0]


async def test_a_claim_checked_payload_from_one_leaf_is_fetched_on_the_other_from_the_hubs_one_copy(
    mirrored: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _hub_state(mirrored.hub)
    monkeypatch.setenv(DOMAIN_ENV, "hub")
    payload = {"tool": "shell", "success": True, "output": "leaf " * (300 * 1024), "tag": unique("big")}
    app = Subscriber("claims")
    probes: list[Event] = []
    whole: list[dict[str, Any]] = []
    refs: list[Any] = []

    @app.on("tool_call")
    async def keep(event: Event, out: Bus) -> None:
        if event.payload_ref is None:
            probes.append(event)
            return
        refs.append(event.payload_ref)
        whole.append(await event.full_payload())

    async with (
        Bus(as_user(mirrored.leaf_b, "worker")) as worker,
        Bus(as_user(mirrored.leaf_a, "operator")) as prober,
        Bus(as_user(mirrored.leaf_a, "agent-eva")) as eva,
    ):
        await app.start(worker)
        try:

            async def heard() -> bool:  # the worker's interest crossed the hub to leaf a
                await prober.emit("prx.lifecycle.tool_call", {"tool": "probe"})
                return bool(probes)

            await wait_until(heard, what="a probe from leaf a heard on leaf b")
            await eva.emit("prx.lifecycle.tool_call", payload)
            await wait_until(lambda: whole, what="the payload fetched on leaf b")
        finally:
            await app.stop()
    assert whole[0] == payload and refs[0] is not None
    hub = await nats.connect(as_user(mirrored.hub, "operator"))
    try:
        meta = await hub.jetstream().get_msg(PAYLOADS_STREAM, seq=int(refs[0].name), direct=True)
        assert meta.subject == f"{PAYLOADS_METAS}.agent-eva"
    finally:
        await hub.close()
    for leaf in (mirrored.leaf_a, mirrored.leaf_b):
        assert PAYLOADS_STREAM not in await own_streams(leaf), leaf.url
