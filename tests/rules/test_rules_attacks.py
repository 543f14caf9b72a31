"""The rules bucket under the shipped permissions: only the operator writes it; every other role is refused.

A rule file in ``hookbus_rules`` is fleet policy: whoever could write it could
switch a guard off on every kernel (a rule still needs approval to run, but a
deleted or rolled-up file stops the approved one too). Each attack runs as the
attacker's own NATS user against deploy/nats/permissions.conf on a real
server; the operator's push and an agent kernel that enforces it are the
control.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client

from bus import Bus, Cancel, NatsServer
from bus._core.subjects import PRESENCE_BUCKET, RULES_BUCKET
from bus._middleware.registry import ensure_buckets
from bus._presence import MAX_AGE_S as PRESENCE_MAX_AGE_S
from tests.conftest import as_user as url
from tests.conftest import connect_as as raw
from tests.conftest import run_cli, shipped_server

RULE = b"""
rules:
  - name: no-rm
    stage: tool
    if: 'payload.input.command.contains("rm -rf")'
    then: {cancel: "no rm -rf"}
"""
EMPTY = b"rules: []\n"
ATTACKERS = ("agent-eva", "agent-bob", "module-guard", "worker", "sink", "bus")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "rules-attacks")


async def attempt(nc: Client, subject: str, data: bytes, headers: dict[str, str] | None = None) -> str:
    """Publish to the stream; what the server said (a denied publish gets no ack: the stream's count proves it)."""
    try:
        ack = await nc.jetstream(timeout=0.5).publish(subject, data, headers=headers)
    except (nats.js.errors.Error, nats.errors.Error) as exc:
        return f"refused: {exc!r}"
    return f"stored as {ack.seq}"


async def test_only_the_operator_writes_rule_files_and_agents_enforce_them(server: NatsServer, tmp_path: Path) -> None:
    async with Bus(url(server, "bus")) as bus_role:  # what `hookbus up` makes, as the bus role
        await ensure_buckets(bus_role.port, (PRESENCE_BUCKET, PRESENCE_MAX_AGE_S), (RULES_BUCKET, None))
    path = tmp_path / "guards.yaml"
    path.write_bytes(RULE)
    pushed = await asyncio.to_thread(run_cli, "rules", "push", str(path), "--nats-url", url(server, "operator"))
    assert pushed.returncode == 0, pushed.stderr
    assert "pushed guards: guards.no-rm" in pushed.stdout
    async with raw(server, "operator") as op:
        for user in ATTACKERS:
            async with raw(server, user) as attacker:
                tries = [
                    await attempt(attacker, f"$KV.{RULES_BUCKET}.guards", EMPTY),  # overwrite the fleet's file
                    await attempt(attacker, f"$KV.{RULES_BUCKET}.mine", RULE),  # add a file of its own
                    await attempt(attacker, f"$KV.{RULES_BUCKET}.guards", b"", {"KV-Operation": "DEL"}),
                    await attempt(
                        attacker, f"$KV.{RULES_BUCKET}.x", b"", {"KV-Operation": "PURGE", "Nats-Rollup": "all"}
                    ),
                ]
                assert all(one.startswith("refused") for one in tries), (user, tries)
        info = await op.jetstream().stream_info(f"KV_{RULES_BUCKET}")
        assert info.state.messages == 1  # the operator's file, nothing else
        assert info.config.allow_rollup_hdrs is False and info.config.deny_purge is True
        entry = await (await op.jetstream().key_value(RULES_BUCKET)).get("guards")
        assert entry.value == RULE
    approved = await asyncio.to_thread(run_cli, "approve", "guards.no-rm", "--nats-url", url(server, "operator"))
    assert approved.returncode == 0, approved.stderr
    async with Bus(url(server, "agent-eva")) as eva:  # an agent reads the bucket and enforces the approved rule
        view = await eva.middleware.start()
        await view.wait_until(lambda: "tool.call" in view.chains and bool(view.chains["tool.call"].links), 10)
        decision = await eva.intercept("tool.call", {"name": "shell", "input": {"command": "rm -rf /"}})
        assert isinstance(decision, Cancel) and decision.handler == "guards.no-rm"
