"""Rejecting a waiting handler version (CLI, console) on a real `hookbus up`; plugins and records on the Hooks API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from bus import Bus, Cancel, Continue, Module, StageCtx
from bus._journal.entries import JournalEntry
from bus._middleware.kernel.approvals import approve, queue, rejected
from bus._records.record import from_fields
from bus._records.store import RecordStore
from bus.testing import JournalRecorder, serving, wait_for_chain
from tests.cli.test_cli import UpProcess
from tests.conftest import run_cli, unique
from tests.services.test_console_api import Client, console_shows, journal, links
from tests.support.plugin_support import write_plugin
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("reject"))
    yield process
    process.close()


@pytest.fixture
async def client(up: UpProcess) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as session:
        yield Client(up, session)


def guard(name: str, stage: str, reason: str) -> Module:
    """A module whose one handler cancels with ``reason`` (another reason: another version)."""
    module = Module(name)

    @module.stage(stage, code=reason)
    async def h(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Cancel:
        return Cancel(reason)

    return module


async def test_hookbus_reject_takes_a_version_out_of_the_queue_for_good_and_a_new_version_waits_again(
    up: UpProcess,
) -> None:
    name, stage = unique("rej"), f"custom.{unique('r')}"
    qualname = f"{name}.h"
    async with Bus(up.nats_url, name="kernel") as kernel:
        view = await kernel.middleware.start()
        journaled = await JournalRecorder().attach(kernel)
        async with serving(guard(name, stage, "v1"), up.nats_url):
            await view.wait_until(lambda: any(w.decl.qualname == qualname for w in queue(view)), 15)
            done = await asyncio.to_thread(run_cli, "reject", qualname, "--nats-url", up.nats_url)
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith(f"rejected {qualname} (stage {stage}, identity ")
            await view.wait_until(lambda: [link.decl.qualname for link in rejected(view)] == [qualname], 15)
            assert not any(w.decl.qualname == qualname for w in queue(view))
            assert await kernel.intercept(stage, {}) == Continue(), "a rejected version is never called"

            listed = await asyncio.to_thread(run_cli, "approvals", "--nats-url", up.nats_url)
            assert f"{qualname}  rejected  stage {stage}" in listed.stdout
            chain = await asyncio.to_thread(run_cli, "chain", "--nats-url", up.nats_url)
            assert any(
                qualname in line and "rejected" in line and "REJECTED" in line for line in chain.stdout.splitlines()
            )
            again = await asyncio.to_thread(run_cli, "reject", qualname, "--nats-url", up.nats_url)
            assert again.returncode != 0 and f"no handler named {qualname!r} is waiting" in again.stderr

        def mine() -> list[JournalEntry]:
            return [e for e in journaled.entries if e.who == qualname and e.decision == "rejected"]

        await wait_until(lambda: bool(mine()), what="the rejection journaled")
        [entry] = mine()
        assert entry.cause is not None and entry.cause.startswith("rejected by ") and entry.identity

        async with serving(guard(name, stage, "v2"), up.nats_url):  # a new version: waits for approval again
            await view.wait_until(lambda: any(w.decl.qualname == qualname for w in queue(view)), 15)
            assert not rejected(view)
            await approve(view, qualname)
            await wait_for_chain(kernel, stage, [qualname])
            decision = await kernel.intercept(stage, {})
            assert isinstance(decision, Cancel) and decision.reason == "v2"


async def test_the_console_rejects_shows_the_rejection_and_journals_it_as_the_console(
    client: Client, up: UpProcess
) -> None:
    name, stage = unique("crej"), f"custom.{unique('c')}"
    qualname = f"{name}.h"
    async with serving(guard(name, stage, "v1"), up.nats_url):
        await console_shows(client, lambda got: any(w["name"] == qualname for w in got["approvals"]), "waiting")
        answer = await client.ok("POST", "/api/middleware/reject", {"name": qualname})
        assert [r["name"] for r in answer["rejected"]] == [qualname]
        listing = await console_shows(client, lambda got: (qualname, "rejected") in links(got, "rejected"), "rejected")
        assert not any(w["name"] == qualname for w in listing["approvals"])
        status, body = await client.call("POST", "/api/middleware/reject", {"name": qualname}, client.auth)
        assert status == 409 and f"no handler named {qualname!r} is waiting" in body["error"]
        status, body = await client.call("POST", "/api/middleware/reject", {"name": qualname})
        assert (status, body) == (401, {"error": "missing or wrong bearer token"})
    [entry] = await journal(client, f"who={qualname}&decision=rejected")
    assert entry["cause"] == "rejected by console"


async def test_the_hooks_api_lists_plugins_and_records_read_only_and_refuses_without_the_token(
    client: Client, up: UpProcess
) -> None:
    plugin = unique("plug")
    write_plugin(client.workspace, plugin, "(component)")
    broken = client.workspace / "plugins" / unique("bad")
    broken.mkdir()
    (broken / "plugin.toml").write_text("[plugin\n")
    module = unique("recs")
    async with Bus(up.nats_url) as bus:
        source = "async def handle(stage, payload, ctx):\n    return Continue()\n"
        await RecordStore(bus.port, module).put(from_fields({"name": "r1", "stage": "tool.call", "source": source}))
    status, body = await client.call("GET", "/api/handlers")
    assert (status, body) == (401, {"error": "missing or wrong bearer token"})
    listing = await client.ok("GET", "/api/handlers")
    plugins = {p["name"]: p for p in listing["plugins"]}
    assert plugins[plugin]["version"] == "1.0.0" and plugins[plugin]["events"]
    assert "not valid TOML" in plugins[broken.name]["error"]
    [record] = [r for r in listing["records"] if r["name"] == f"{module}.r1"]
    assert (record["stage"], record["state"], record["enabled"]) == ("tool.call", "waiting for approval", True)
