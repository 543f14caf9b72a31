"""``hookbus test-module``: a module file's chain run in process, no nats-server anywhere."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bus._core.declaration import declare
from tests.conftest import run_cli

GUARD = """
from bus import Cancel, Continue, Module, Patch

guard = Module("guard")


@guard.stage("tool.call", when={"agents": ["eva*"]}, fail_closed=True, match="shell")
async def no_rm(stage, payload, ctx):
    if "rm -rf" in payload["input"]["command"]:
        return Cancel(f"only by hand ({ctx.agent}, {ctx.user})")
    return Continue()


@guard.stage("tool.call", priority=5)
async def tag(stage, payload):
    return Patch({**payload, "tagged": True})


@guard.stage("tool.call", inputs=[{"key": "intent.label", "default": "none"}])
async def later(stage, payload):
    return Continue()


@guard.stage("tool.call", after="later")
async def last(stage, payload):
    raise RuntimeError("boom")
"""
#: No server listens here: anything that tried to reach a bus would fail.
NO_SERVER = {"NATS_URL": "nats://127.0.0.1:9"}
CALL = '{"name": "shell", "input": {"command": "rm -rf /"}}'


@pytest.fixture
def guard_file(tmp_path: Path) -> Path:
    path = tmp_path / "guard.py"
    path.write_text(GUARD)
    return path


def _entries(stdout: str) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stdout.splitlines() if line.startswith("  {")]


def test_runs_the_chain_in_process_and_prints_the_journal(guard_file: Path) -> None:
    done = run_cli("test-module", str(guard_file), "tool.call", CALL, "--agent", "eva-2", "--user", "al", env=NO_SERVER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('decision: {"decision":"cancel","reason":"only by hand (eva-2, al)"')
    # priority 5 first, then declaration order among equals; on tool.call a cancel does not end the chain
    # (a later handler's result would beat it, as in agent_os): guard.last is asked, fails, and the cancel stands.
    assert [(e["who"], e["decision"]) for e in _entries(done.stdout)] == [
        ("guard.tag", "patch"),
        ("guard.no_rm", "cancel"),
        ("guard.last", "failed"),
    ]


def test_when_leaves_a_handler_out_and_faults_are_journaled(guard_file: Path) -> None:
    done = run_cli("test-module", str(guard_file), "tool.call", CALL, "--agent", "bob", env=NO_SERVER)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert orjson.loads(first.removeprefix("decision: ")) == {
        "decision": "patch",
        "payload": {"name": "shell", "input": {"command": "rm -rf /"}, "tagged": True},
    }
    entries = _entries(done.stdout)
    assert [(e["who"], e["decision"]) for e in entries] == [("guard.tag", "patch"), ("guard.last", "failed")]
    assert "RuntimeError: boom" in str(entries[1]["cause"]) and "fail-open" in str(entries[1]["cause"])
    assert all(e["agent"] == "bob" for e in entries)


def test_info_lists_order_when_and_identities(guard_file: Path) -> None:
    done = run_cli("test-module", str(guard_file), "info", env=NO_SERVER)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["module guard: 4 handlers", "tool.call"]
    assert [line.split()[1] for line in lines[2:]] == ["guard.tag", "guard.no_rm", "guard.later", "guard.last"]
    assert "priority 5" in lines[2] and "when agents eva*" in lines[3] and "after guard.later" in lines[5]
    assert "reads intent.label (default 'none')" in lines[4]
    plain = declare("guard", "later", "tool.call").identity()
    assert plain not in done.stdout  # the code digest is part of the identity: never a bare declaration's
    assert all(len(line.rsplit("identity ", 1)[1]) == 64 for line in lines[2:])


def test_bad_input_is_named(guard_file: Path, tmp_path: Path) -> None:
    bad = run_cli("test-module", str(guard_file), "tool.call", "[1]", env=NO_SERVER)
    assert bad.returncode != 0 and "payload" in bad.stderr
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    none = run_cli("test-module", str(empty), "info", env=NO_SERVER)
    assert none.returncode != 0 and "must define one bus.Module" in none.stderr
    stage = run_cli("test-module", str(guard_file), "tool..call", "{}", env=NO_SERVER)
    assert stage.returncode != 0 and "tool..call" in stage.stderr
