"""``hookbus emit``'s one-shot path, as real processes against a real nats-server.

The one-shot path (bus/_transport/oneshot.py: a plain socket, no nats-py) must
put on the wire exactly what the full client puts there, keep the bus's
rules (depth, size limit, permissions) and load nothing heavy.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from bus import Bus, NatsServer
from bus._core.envelope import DEFAULT_MAX_BYTES, decode_event
from bus.testing import EventRecorder
from tests.conftest import hookbus_cmd, run_cli, shipped_permissions
from tests.support.waiting import barrier, wait_until, without_barriers

#: What ``hookbus emit`` must not import: the full NATS client, the HTTP stack, the event loop, metrics.
HEAVY = ("nats", "aiohttp", "asyncio", "prometheus_client", "msgspec", "tenacity")
#: The id and timestamp of an envelope, which differ between any two events.
_VARYING = re.compile(rb'"timestamp":"[^"]*"|"id":"[^"]*"')


def env_for(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    return {**env, "NATS_URL": url, **extra}


async def received_raw(raw: Client, subject: str) -> list[bytes]:
    """Subscribe ``raw`` to ``subject``; the list fills with the bytes of each message."""
    got: list[bytes] = []

    async def keep(msg: object) -> None:
        got.append(msg.data)  # type: ignore[attr-defined]

    await raw.subscribe(subject, cb=keep)
    await raw.flush()
    return got


def emit(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*hookbus_cmd(), *args], env=env, input=stdin, capture_output=True, text=True, timeout=30, check=False
    )


def test_emit_loads_nothing_heavy(nats_url: str) -> None:
    script = (
        "import sys\n"
        "from bus._cli import main\n"
        "code = main(['emit', 'eva.custom.light', '{}'])\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env_for(nats_url), capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_one_shot_envelope_is_the_full_clients(nats_url: str, raw: Client) -> None:
    subject = "eva.custom.same_bytes"
    got = await received_raw(raw, subject)
    payload = '{"text": "héllo \\u2028 wörld", "n": 1.5, "nested": {"list": [1, null, true]}}'
    env = env_for(nats_url, HOOKBUS_DEPTH="3")
    fast = await asyncio.to_thread(emit, "emit", subject, payload, "--session", "s-1", env=env)
    full = await asyncio.to_thread(emit, "-v", "emit", subject, payload, "--session", "s-1", env=env)
    assert fast.returncode == 0 and full.returncode == 0, (fast.stderr, full.stderr)
    await wait_until(lambda: len(got) == 2, 10, "both envelopes")
    one_shot, full_client = got
    assert _VARYING.sub(b"", one_shot) == _VARYING.sub(b"", full_client)
    event = decode_event(subject, one_shot)
    assert (event.depth, event.session_id, event.payload["nested"]) == (3, "s-1", {"list": [1, None, True]})
    assert event.id != decode_event(subject, full_client).id


async def test_jsonl_sends_every_line_over_one_connection() -> None:
    with NatsServer(http_port=0) as server:
        async with Bus(server.url) as bus:
            rec = EventRecorder()
            await bus.subscribe(">", rec)
            await bus.flush()
            before = _total_connections(server)
            lines = [
                {"subject": "tool_call", "payload": {"tool": "shell", "success": True, "output": "ok"}},
                {"subject": "eva.custom.deploy", "payload": {"env": "prod"}, "session_id": "s-9"},
                {"subject": "eva.turn.completed"},
            ]
            stdin = "\n".join(json.dumps(line) for line in lines) + "\n\n"
            done = await asyncio.to_thread(
                emit, "emit", "--jsonl", "--session", "s-0", env=env_for(server.url), stdin=stdin
            )
            assert done.returncode == 0, done.stderr
            events = await rec.wait_for(3)
            assert [(e.subject, e.session_id) for e in events] == [
                ("prx.lifecycle.tool_call", "s-0"),
                ("eva.custom.deploy", "s-9"),
                ("eva.turn.completed", "s-0"),
            ]
            assert events[1].payload == {"env": "prod"} and events[2].payload == {}
            assert _total_connections(server) == before + 1


def _total_connections(server: NatsServer) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/varz", timeout=10) as reply:
        return int(json.loads(reply.read())["total_connections"])


async def test_jsonl_with_a_bad_line_sends_nothing(nats_url: str, bus: Bus) -> None:
    rec = EventRecorder()
    await bus.subscribe("eva.custom.>", rec)
    await bus.flush()
    stdin = '{"subject": "eva.custom.first"}\n{"subject": "eva.custom.second", "payload": []}\n'
    done = await asyncio.to_thread(emit, "emit", "--jsonl", env=env_for(nats_url), stdin=stdin)
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == "hookbus: error: stdin line 2: 'payload' must be a JSON object, not array"
    await barrier(bus, "eva.custom.barrier", rec)
    assert without_barriers(rec.events) == []


def test_at_the_depth_limit_nothing_is_sent_and_no_bus_is_needed() -> None:
    done = run_cli("emit", "eva.custom.deep", "{}", env={"NATS_URL": "nats://127.0.0.1:1", "HOOKBUS_DEPTH": "8"})
    assert (done.returncode, done.stderr) == (0, "")


async def test_an_event_over_the_limit_goes_through_the_full_client(nats_url: str, raw: Client) -> None:
    subject = "eva.custom.large"
    got = await received_raw(raw, subject)
    payload = json.dumps({"text": "x" * (DEFAULT_MAX_BYTES + 1000)})
    done = await asyncio.to_thread(emit, "emit", subject, "-", env=env_for(nats_url), stdin=payload)
    assert done.returncode == 0, done.stderr
    await wait_until(lambda: got, 10, "the large event")
    assert len(got[0]) <= DEFAULT_MAX_BYTES
    assert decode_event(subject, got[0]).truncated


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server running deploy/nats/permissions.conf as shipped."""
    config = shipped_permissions(tmp_path_factory.mktemp("emit-permissions"))
    with NatsServer(config_file=config, jetstream=False) as server:
        yield server


async def test_one_shot_authenticates_as_the_shipped_users(shipped: NatsServer) -> None:
    operator = f"nats://operator:change-me-operator@127.0.0.1:{shipped.port}"
    async with Bus(operator) as op:
        rec = EventRecorder()
        await op.subscribe("prx.lifecycle.>", rec)
        await op.flush()
        plain = f"nats://127.0.0.1:{shipped.port}"
        by_flags = await asyncio.to_thread(
            emit,
            "emit",
            "tool_call",
            '{"tool": "a"}',
            "--nats-user",
            "agent-eva",
            "--nats-password",
            "change-me-agent-eva",
            env=env_for(plain),
        )
        in_url = f"nats://agent-eva:change-me-agent-eva@127.0.0.1:{shipped.port}"
        by_url = await asyncio.to_thread(emit, "emit", "tool_call", '{"tool": "b"}', env=env_for(in_url))
        by_env = await asyncio.to_thread(
            emit,
            "emit",
            "tool_call",
            '{"tool": "c"}',
            env=env_for(plain, HOOKBUS_NATS_USER="worker", HOOKBUS_NATS_PASSWORD="change-me-worker"),
        )
        assert [p.returncode for p in (by_flags, by_url, by_env)] == [0, 0, 0], (by_flags.stderr, by_env.stderr)
        events = await rec.wait_for(3)
        assert sorted(e.payload["tool"] for e in events) == ["a", "b", "c"]


async def test_one_shot_names_a_refused_publish_and_bad_credentials(shipped: NatsServer) -> None:
    sink = f"nats://sink:change-me-sink@127.0.0.1:{shipped.port}"
    denied = await asyncio.to_thread(emit, "emit", "eva.custom.deploy", "{}", env=env_for(sink))
    assert denied.returncode == 1
    assert denied.stderr.splitlines() == [  # sent vouched as its user (docs/protocol.md#publisher-identity)
        "hookbus: error: the NATS server denied publishing to 'hookbus.from.sink.eva.custom.deploy' "
        '(Permissions Violation for Publish to "hookbus.from.sink.eva.custom.deploy")'
    ]
    wrong = f"nats://agent-eva:wrong@127.0.0.1:{shipped.port}"
    refused = await asyncio.to_thread(emit, "emit", "eva.custom.deploy", "{}", env=env_for(wrong))
    assert refused.returncode == 1
    assert len(refused.stderr.splitlines()) == 1
    shown = f"nats://agent-eva:***@127.0.0.1:{shipped.port}"  # never the password
    assert refused.stderr.startswith(f"hookbus: error: cannot connect to NATS at {shown} ")
    assert "refused the credentials" in refused.stderr


async def test_the_full_client_names_a_refused_publish_too(shipped: NatsServer) -> None:
    sink = f"nats://sink:change-me-sink@127.0.0.1:{shipped.port}"
    denied = await asyncio.to_thread(emit, "-v", "emit", "eva.custom.deploy", "{}", env=env_for(sink))
    assert denied.returncode == 1
    assert denied.stderr.splitlines()[-1] == (
        "hookbus: error: the NATS server denied publishing to 'eva.custom.deploy' "
        "(a permissions violation, logged above)"
    )
    assert 'permissions violation for publish to "hookbus.from.sink.eva.custom.deploy"' in denied.stderr.lower()


def test_a_tls_setting_goes_through_the_full_client(tmp_path: Path) -> None:
    """A CA file given: the one-shot path declines (it speaks no TLS) and the full client reports its own error."""
    done = run_cli("emit", "eva.custom.tls", "{}", "--tls-ca", str(tmp_path / "missing-ca.pem"))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"hookbus: error: TLS CA file '{tmp_path / 'missing-ca.pem'}' does not exist"]
