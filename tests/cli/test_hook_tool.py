"""``hookbus test-module`` with agent_os's hook_tool commands: each runs its point with the payload the reference
runner sends, the call's context from the flags, and ``--db`` as every handler's config db_path."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus._cli import hook_tool
from bus._core import payloads
from bus._core.errors import ConfigError
from tests.conftest import run_cli

NO_SERVER = {"NATS_URL": "nats://127.0.0.1:1"}  # test-module needs none

#: One handler per point: a patch that shows the payload and the context it was given.
MODULE = """
from bus import Module, Patch, Stage

module = Module("shown")

def show(stage):
    async def handler(stage_name, payload, ctx):
        seen = {"agent": ctx.agent, "user": ctx.user, "session": ctx.session, "template": ctx.template,
                "db": ctx.config.get("db_path"), "servers": list(ctx.bus.servers)}
        return Patch({**payload, "seen": seen})
    handler.__name__ = stage.replace(".", "_")
    module.stage(stage)(handler)

for stage in ("user.message", "turn.after", "loop.end", "tool.call", "tool.result", "llm.request", "llm.token",
              "context.evict", "agent.spawn", "agent.terminate", "agent.error"):
    show(stage)
"""

#: command line -> (stage, the fields of the payload it builds).
CASES: list[tuple[list[str], str, dict[str, Any]]] = [
    (["user", "Hello, world"], "user.message", {"content": "Hello, world"}),
    (["turn", "question", "answer"], "turn.after", {"question": "question", "answer": "answer"}),
    (["loop", "job_done"], "loop.end", {"reason": "job_done"}),
    (["tool", "echo", '{"msg": "x"}'], "tool.call", {"name": "echo", "input": {"msg": "x"}}),
    (["result", "echo", "text", "false"], "tool.result", {"name": "echo", "output": "text", "is_error": False}),
    (["inference", '{"model": "m"}'], "llm.request", {"model": "m", "attempt": 1}),
    (["token", "chunk", "false"], "llm.token", {"text": "chunk", "final_answer": False}),
    (["evict", "summary"], "context.evict", {"summary": "summary", "evicted": []}),
    (["spawn"], "agent.spawn", {"agent": "eva", "depth": 0}),
    (["terminate", "0"], "agent.terminate", {"success": True, "error": None}),
    (["terminate", "3"], "agent.terminate", {"success": False, "error": "exit code 3"}),
    (["error", "boom"], "agent.error", {"error": "boom", "component": "agent"}),
]


@pytest.fixture(scope="module")
def module_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hook_tool") / "shown.py"
    path.write_text(MODULE)
    return path


@pytest.mark.parametrize(("argv", "stage", "fields"), CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_each_hook_tool_command_runs_its_point(
    module_file: Path, argv: list[str], stage: str, fields: dict[str, Any]
) -> None:
    flags = ["--agent", "eva", "--template", "coder", "--user", "ann", "--session", "s-42", "--db", "/tmp/t.db"]
    done = run_cli("test-module", str(module_file), *argv, *flags, env=NO_SERVER)
    assert done.returncode == 0, done.stderr
    decision = orjson.loads(done.stdout.splitlines()[0].removeprefix("decision: "))
    assert decision["decision"] == "patch"
    payload = decision["payload"]
    seen = {key: value for key, value in payload["seen"].items() if key != "servers"}
    assert seen == {"agent": "eva", "user": "ann", "session": "s-42", "template": "coder", "db": "/tmp/t.db"}
    assert payload["seen"]["servers"] != []
    assert {key: payload[key] for key in fields} == fields
    journal = [orjson.loads(line) for line in done.stdout.splitlines()[2:]]
    assert [(e["point"], e["who"]) for e in journal] == [(stage, f"shown.{stage.replace('.', '_')}")]


#: The typed payload of each stage a command runs: a built payload has exactly its fields (nothing unknown).
TYPED = {
    "user.message": payloads.UserMessage, "turn.after": payloads.TurnAfter, "loop.end": payloads.LoopEnd,
    "tool.call": payloads.ToolCall, "tool.result": payloads.ToolResult, "llm.request": payloads.LlmRequest,
    "llm.token": payloads.LlmToken, "context.evict": payloads.ContextEvict, "agent.spawn": payloads.AgentSpawn,
    "agent.terminate": payloads.AgentTerminate, "agent.error": payloads.AgentError,
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(hook_tool.COMMANDS))
def test_every_command_builds_its_stages_payload_field_for_field(command: str) -> None:
    argv = next(argv for argv, _, _ in CASES if argv[0] == command)
    stage, payload = hook_tool.call(command, argv[1:], "eva")
    typed = TYPED[stage]
    runner_extra = {"attempt"} if stage == "llm.request" else set()  # the runner sends it beside the typed fields
    assert set(payloads.from_dict(typed, payload).rest) == runner_extra
    known = {f.name for f in dataclasses.fields(typed)} - {"rest"}
    assert set(payload) - runner_extra <= known


def test_a_command_with_the_wrong_arguments_names_its_usage(module_file: Path) -> None:
    with pytest.raises(ConfigError, match=r'usage: hookbus test-module FILE turn "question" "answer"'):
        hook_tool.call("turn", ["only one"], None)
    done = run_cli("test-module", str(module_file), "tool", "echo", "[1]", env=NO_SERVER)
    assert done.returncode != 0 and "tool input must be a JSON object" in done.stderr
    json_form = run_cli("test-module", str(module_file), "agent.error", '{"error": "x"}', env=NO_SERVER)
    assert json_form.returncode == 0 and '"error":"x"' in json_form.stdout  # the JSON form still works


def test_live_runs_the_command_over_a_real_server_with_the_module_on_the_wire(module_file: Path, nats_url: str) -> None:
    done = run_cli(
        "test-module", str(module_file), "user", "Hello", "--live", "--nats-url", nats_url,
        "--agent", "eva", "--db", "/tmp/live.db",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    decision = orjson.loads(done.stdout.splitlines()[0].removeprefix("decision: "))
    assert decision["payload"]["content"] == "Hello" and decision["payload"]["seen"]["db"] == "/tmp/live.db"
    assert decision["payload"]["seen"]["servers"] == [nats_url]  # served on the wire of the real server
    journal = [orjson.loads(line) for line in done.stdout.splitlines()[2:]]
    assert [(e["point"], e["who"], e["agent"]) for e in journal] == [("user.message", "shown.user_message", "eva")]
