"""deploy/nats/permissions.conf on a real server: each role can do its job and nothing it must not."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest

from bus import Bus, Cancel, ConnectError, Continue, Credentials, Module, NatsServer, Stage, TurnRequest
from bus._transport.publisher import ordered_flush
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.conftest import run_cli, shipped_permissions
from tests.support.waiting import barrier, wait_until, without_barriers

PASSWORDS = {
    "agent-eva": "change-me-agent-eva",
    "module-guard": "change-me-module-guard",
    "worker": "change-me-worker",
    "operator": "change-me-operator",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """The deploy config as it is, but for its JetStream store (a temporary directory)."""
    tmp = tmp_path_factory.mktemp("permissions")
    config = shipped_permissions(tmp)
    with NatsServer(config_file=config, jetstream=False) as started:
        yield started


def url(server: NatsServer, user: str, password: str | None = None) -> str:
    return f"nats://{user}:{password or PASSWORDS[user]}@127.0.0.1:{server.port}"


async def test_agent_emits_and_serves_its_own_turns(server: NatsServer) -> None:
    async with Bus(url(server, "operator")) as op, Bus(url(server, "agent-eva")) as agent:
        rec = EventRecorder()
        await op.subscribe("prx.lifecycle.>", rec)
        await op.flush()
        await agent.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True, "output": ""})
        await rec.wait_for(1)
        turns: list[str] = []

        async def handle(request: TurnRequest) -> str:
            turns.append(request.prompt)
            return "ok"

        await agent.serve_turns("eva", handle)
        await agent.flush()
        await op.request_turn(TurnRequest(agent="eva", prompt="hello"))
        await wait_until(lambda: turns, 10, "the turn request")
        assert turns == ["hello"]


async def test_agent_cannot_answer_middleware_requests(server: NatsServer) -> None:
    agent = await nats.connect(url(server, "agent-eva"), error_cb=_quiet)
    op = await nats.connect(url(server, "operator"))
    try:

        async def impersonate(msg: Any) -> None:
            await msg.respond(b'{"decision": "continue"}')

        await agent.subscribe("hookbus.mw.guard", cb=impersonate)
        await ordered_flush(agent, 5)  # nats-py's own flush may return before the server saw the SUB
        with pytest.raises(nats.errors.NoRespondersError):  # the server says nobody listens: no waiting for it
            await op.request("hookbus.mw.guard", b"{}", timeout=5)
    finally:
        await agent.close()
        await op.close()


async def test_agent_cannot_take_another_agents_turns(server: NatsServer) -> None:
    agent = await nats.connect(url(server, "agent-eva"), error_cb=_quiet)
    got: list[bytes] = []

    async def take(msg: Any) -> None:
        got.append(msg.data)

    try:
        await agent.subscribe("hookbus.turn.bob", cb=take)
        await agent.subscribe("hookbus.turn.eva", cb=take)  # its own: where the barrier comes
        await ordered_flush(agent, 5)
        async with Bus(url(server, "operator")) as op:
            await op.request_turn(TurnRequest(agent="bob", prompt="for bob only"))
            # the same publisher, then the same subscriber connection: bob's turn would be in first
            await op.request_turn(TurnRequest(agent="eva", prompt="barrier"))
            await wait_until(lambda: any(b"barrier" in data for data in got), 10, "the barrier turn")
        assert [b"barrier" in data for data in got] == [True]  # its own turn only, bob's never
    finally:
        await agent.close()


async def test_module_answers_its_stage_but_cannot_publish_lifecycle_events(server: NatsServer) -> None:
    guard = Module("guard")

    @guard.stage(Stage.TOOL_CALL)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
        return Cancel("only by hand") if "rm" in payload["input"]["command"] else Continue()

    async with Bus(url(server, "operator"), trust_new=True) as op:
        await op.middleware.start()  # the operator creates the registry and trust buckets
        rec = EventRecorder()
        await op.subscribe("prx.lifecycle.>", rec)
        await op.flush()
        async with serving(guard, url(server, "module-guard")):
            async with Bus(url(server, "agent-eva"), managed=["guard.no_rm"]) as agent:
                await wait_for_chain(agent, "tool.call", ["guard.no_rm"])
                decision = await agent.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "rm -rf /"}})
                assert decision == Cancel("only by hand", "guard.no_rm")
            async with Bus(url(server, "module-guard")) as module_bus:
                await module_bus.emit("prx.lifecycle.tool_call", {"tool": "forged", "success": True, "output": ""})
                await module_bus.flush()  # the server has routed (or refused) it: a barrier sent now comes after
        await barrier(op, "prx.lifecycle.tool_call", rec)
        assert without_barriers(rec.events) == []


async def test_wrong_credentials_are_refused_clearly(server: NatsServer) -> None:
    with pytest.raises(ConnectError, match="refused the credentials"):
        async with Bus(url(server, "agent-eva", "wrong"), connect_timeout=2):
            pass
    done = await asyncio.to_thread(
        run_cli,
        "emit", "eva.custom.x", "{}", "--nats-url", f"nats://127.0.0.1:{server.port}",
        "--nats-user", "worker", "--nats-password", "wrong",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Authorization Violation" in done.stderr
    assert "Traceback" not in done.stderr


async def _quiet(exc: Exception) -> None:
    """Permission violations are what these tests provoke."""


async def test_token_from_the_environment_and_the_cli_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    with NatsServer(extra_args=("--auth", "s3cret-token")) as server:
        with pytest.raises(ConnectError, match="refused the credentials"):
            async with Bus(server.url, connect_timeout=1):
                pass
        monkeypatch.setenv("HOOKBUS_NATS_TOKEN", "s3cret-token")
        async with Bus(server.url) as bus:
            rec = EventRecorder()
            await bus.subscribe("eva.custom.>", rec)
            await bus.flush()
            monkeypatch.delenv("HOOKBUS_NATS_TOKEN")
            done = await asyncio.to_thread(
                run_cli, "emit", "eva.custom.t", "{}", "--nats-url", server.url, "--nats-token", "s3cret-token"
            )
            assert done.returncode == 0, done.stderr
            await rec.wait_for(1)


async def test_nkey_seed_file(tmp_path: Path) -> None:
    import os

    import nkeys

    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    (tmp_path / "user.nk").write_bytes(seed)
    config = tmp_path / "nkeys.conf"
    config.write_text(f"authorization {{ users: [ {{ nkey: {public} }} ] }}\n")
    with NatsServer(config_file=config, jetstream=False) as server:
        with pytest.raises(ConnectError):
            async with Bus(server.url, connect_timeout=1):
                pass
        async with Bus(server.url, nats_options={"nkeys_seed": str(tmp_path / "user.nk")}) as bus:
            assert await bus.emit("eva.custom.nkey", {})
        done = await asyncio.to_thread(
            run_cli,
            "emit",
            "eva.custom.n",
            "{}",
            "--nats-url",
            server.url,
            "--nats-nkey-seed",
            str(tmp_path / "user.nk"),
        )
        assert done.returncode == 0, done.stderr


async def test_credentials_reach_the_bus_as_arguments_and_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOOKBUS_NATS_TOKEN", "wrong-token")
    with NatsServer(extra_args=("--auth", "s3cret-token")) as server:
        with pytest.raises(ConnectError, match="refused the credentials"):
            async with Bus(server.url, connect_timeout=1):
                pass
        async with Bus(server.url, credentials=Credentials(token="s3cret-token")) as bus:
            rec = EventRecorder()
            await bus.subscribe("eva.custom.>", rec)
            await bus.emit("eva.custom.arg", {})
            await rec.wait_for(1)
    assert os.environ["HOOKBUS_NATS_TOKEN"] == "wrong-token"


def test_the_command_line_passes_flags_as_credentials_without_writing_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bus._cli import build_parser
    from bus._cli.common import connection_args

    monkeypatch.delenv("HOOKBUS_NATS_TOKEN", raising=False)
    args = build_parser().parse_args(["emit", "eva.custom.x", "{}", "--nats-token", "t0k", "--tls-ca", "/ca.pem"])
    kwargs = connection_args(args)
    assert kwargs["credentials"] == Credentials(token="t0k", tls_ca="/ca.pem")
    assert "HOOKBUS_NATS_TOKEN" not in os.environ
