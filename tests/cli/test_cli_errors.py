"""Each error the command line reports, by its exact first line, as real processes.

A newcomer reads the first line: it must say what is wrong and what to do.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli

NO_SERVER = "hookbus: no NATS server at {url} (connection refused): is 'hookbus up' running? set NATS_URL or --nats-url"


@pytest.fixture
def closed_url() -> str:
    """A URL where nothing listens: a port the system just gave out and took back."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"nats://127.0.0.1:{port}"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def first_line(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> str:
    done = run_cli(*args, env=env, input=input)
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr
    return done.stderr.splitlines()[0]


@pytest.mark.parametrize(
    "command",
    [
        ["emit", "eva.custom.x", "{}"],  # the one-shot path
        ["chain"],  # the full client, from here on
        ["approvals"],
        ["tail", "prx.*"],
    ],
)
def test_without_a_bus_connecting_commands_say_so(command: list[str], closed_url: str) -> None:
    done = run_cli(*command, env={"NATS_URL": closed_url})
    assert done.returncode == 1
    assert done.stderr.splitlines() == [NO_SERVER.format(url=closed_url)]


def test_the_flag_names_the_server_tried(closed_url: str) -> None:
    line = first_line("emit", "eva.custom.x", "{}", "--nats-url", closed_url, env={"NATS_URL": "nats://10.0.0.1:1"})
    assert line == NO_SERVER.format(url=closed_url)


def test_a_busy_port_is_one_line_naming_the_flag(busy_port: int, tmp_path: Path) -> None:
    done = run_cli(
        "up",
        "--workspace",
        str(tmp_path / "ws"),
        "--port",
        str(busy_port),
        "--metrics-port",
        "-1",
        env={"NATS_URL": ""},
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"hookbus: error: port {busy_port} on 127.0.0.1 is already in use: choose another with --port "
        f"(0: any free port), or use the bus already there with --nats-url nats://127.0.0.1:{busy_port}"
    ]


@pytest.mark.parametrize(
    ("subject", "line"),
    [
        ("tool.call", "did you mean prx.lifecycle.tool_call?"),
        ("toolcall", "did you mean prx.lifecycle.tool_call?"),
        ("tool_calls", "did you mean prx.lifecycle.tool_call?"),
        ("eva.custm.deploy", "did you mean eva.custom.deploy?"),
        ("turn.completed", "did you mean eva.turn.completed?"),
    ],
)
def test_emit_refuses_a_name_outside_the_catalogue_with_the_closest(subject: str, line: str) -> None:
    assert first_line("emit", subject, "{}", env={"NATS_URL": "nats://127.0.0.1:1"}) == (
        f"hookbus: error: invalid subject {subject!r}: not a catalogued event; {line} "
        "('hookbus events' lists them; eva.custom.<name> is free; --any: any subject)"
    )


def test_emit_refuses_a_family_without_a_name_and_plumbing_subjects() -> None:
    env = {"NATS_URL": "nats://127.0.0.1:1"}
    assert first_line("emit", "eva.custom", "{}", env=env) == (
        "hookbus: error: invalid subject 'eva.custom': eva.custom is a family, not an event: "
        "give it a name, eva.custom.<name>"
    )
    for subject in ("_INBOX.x", "hookbus.journal.middleware"):
        for extra in ([], ["--any"]):
            assert first_line("emit", subject, "{}", *extra, env=env) == (
                f"hookbus: error: invalid subject {subject!r}: "
                "_INBOX., $ and hookbus. subjects carry NATS and hookbus plumbing, not events"
            )


def test_json_types_are_named_as_json_names_them() -> None:
    env = {"NATS_URL": "nats://127.0.0.1:1"}
    assert first_line("emit", "eva.custom.x", "null", env=env) == (
        "hookbus: error: the payload must be a JSON object, not null"
    )
    assert first_line("emit", "eva.custom.x", "[1]", env=env) == (
        "hookbus: error: the payload must be a JSON object, not array"
    )
    assert first_line("emit", "tool_call", '{"tool": 3, "success": true, "output": ""}', "--strict", env=env) == (
        "hookbus: error: payload for 'prx.lifecycle.tool_call': field 'tool' must be string, not number"
    )
    assert first_line("emit", "tool_call", '{"tool": "x"}', "--strict", env=env) == (
        "hookbus: error: payload for 'prx.lifecycle.tool_call': missing field 'success' (boolean)"
    )


def test_an_unknown_filter_value_is_refused_with_the_valid_ones(tmp_path: Path) -> None:
    line = first_line("journal", "--decision", "cancell", "--workspace", str(tmp_path))
    assert line.startswith(
        "hookbus: error: --decision 'cancell' is not a journal decision; did you mean cancel? (valid: "
    )
    valid = line.split("(valid: ", 1)[1].rstrip(")").split(", ")
    assert {"continue", "cancel", "patch", "timeout", "absent", "denied", "fired", "suppressed"} <= set(valid)
    assert valid == sorted(valid)


def test_unknown_options_and_missing_arguments_are_named() -> None:
    assert first_line("emit") == "hookbus: error: give a SUBJECT (or --jsonl and events on stdin)"
    assert first_line("emit", "eva.custom.x", "--jsonl") == (
        "hookbus: error: --jsonl reads subjects from stdin: give no SUBJECT"
    )
    assert first_line("emit", "--no-such-flag").startswith("usage: hookbus emit ")


@pytest.mark.parametrize(
    "command",
    [
        ("emit", "eva.custom.x", "{}"),
        ("journal-sink", "--workspace", "WS"),
        ("metrics",),
        ("tail",),
        ("agent", "--name", "eva", "--llm-url", "http://127.0.0.1:9/v1", "--model", "m"),
    ],
    ids=lambda c: c[0],
)
def test_a_refused_connection_fails_at_once_whatever_the_connect_budget(
    closed_url: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """Nobody listening is a fact, not a delay: with a budget of ten minutes the command still ends in
    one attempt (the process's own 30 s bound would fail this test if it retried)."""
    args = [str(tmp_path) if arg == "WS" else arg for arg in command]
    done = run_cli(*args, "--nats-url", closed_url, "--connect-timeout", "600")
    assert done.returncode != 0
    assert NO_SERVER.format(url=closed_url) in done.stderr, done.stderr


async def test_a_bus_whose_server_refuses_fails_in_one_attempt(closed_url: str) -> None:
    import asyncio

    from bus import Bus, ConnectError

    async def connect() -> None:
        async with asyncio.timeout(30):  # a retry for the whole budget would end here instead
            async with Bus(closed_url, connect_timeout=600):
                pass

    with pytest.raises(ConnectError, match="connection refused"):
        await connect()


def test_hookbus_up_says_why_it_joined_a_server_that_is_not_there(closed_url: str, tmp_path: Path) -> None:
    line = first_line("up", "--workspace", str(tmp_path / "ws"), env={"NATS_URL": closed_url})
    assert f"$NATS_URL (set in this shell's environment) names {closed_url}" in line
    assert "unset NATS_URL to run the embedded server" in line
    flag = first_line("up", "--workspace", str(tmp_path / "ws2"), "--nats-url", closed_url)
    assert "--nats-url names" in flag and "drop --nats-url" in flag
