"""Community Claude Code hooks and plugins, copied unchanged (tests/fixtures/claude/README.md), under hookbus.

Each is run as its author documents it: ``node ~/.claude/hooks/<name>.js``
with the script under the hooks' HOME, ``uv run $CLAUDE_PROJECT_DIR/...``, a
plugin folder under ``claude-plugins/``. Every denial the script makes under
Claude Code is a Cancel here; what it lets through goes on. The fail-open
causes each test here guards against (checked on the code before): ``~``
taken literally and no ``HOME`` (node could not find the script, or threw,
and the call went ahead), plugins refused, ``ask`` read as continue, a
context-only prompt hook written back as a refusal, a bash guard's exit 2 or
older ``{"decision": "block"}`` taken for a pass.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Cancel, Continue, Patch
from bus._core.errors import ConfigError
from bus._middleware.asks.store import AskStore
from bus.adapters.claude_code._command_file import parse
from bus.adapters.claude_code._mapping import ClaudeCodeDialect, custom_subject, plan
from bus.adapters.claude_code._mapping import parse as parse_input
from bus.adapters.claude_code.command_modules import MODULE, ClaudeHooksServer, ClaudePluginsServer
from tests.adapters.test_claude_code_handlers import approved
from tests.conftest import nats_for_tests, require_binary
from tests.support.waiting import wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude"
CTX = {"session": "s-community", "agent": "eva"}
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


@pytest.fixture
def nats_url() -> Any:
    """A NATS server of each test's own: a stopped fail-closed module of one test cancels the next one's calls."""
    with nats_for_tests() as url:
        yield url


def home_with_scripts(tmp_path: Path) -> Path:
    """A HOME with the community scripts where their READMEs put them (~/.claude/hooks/)."""
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / "home", home)
    return home


def node_hook(name: str, matcher: str, **more: Any) -> dict[str, Any]:
    return {"matcher": matcher, "hooks": [{"type": "command", "command": f"node ~/.claude/hooks/{name}.js", **more}]}


@asynccontextmanager
async def serving(nats_url: str, workspace: Path, config: dict[str, Any], wanted: set[str]) -> AsyncIterator[Bus]:
    (workspace / "claude-hooks.json").write_text(json.dumps(config))
    async with Bus(nats_url, name="claude-hooks") as serve, Bus(nats_url, trust_new=True) as kernel:
        server = ClaudeHooksServer(serve, workspace, nats_url)
        await server.start()
        try:
            await approved(kernel, wanted)
            yield kernel
        finally:
            await server.stop()


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "input": {"command": command}, "id": "toolu_1"}


@needs_node
async def test_node_guards_run_with_tilde_and_home_and_deny_as_under_claude_code(
    nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    home = home_with_scripts(tmp_path)
    config = {
        "hookbus": {"home": str(home)},
        "hooks": {
            "PreToolUse": [
                node_hook("block-dangerous-commands", "Bash"),
                node_hook("git-safety", "Bash"),
                node_hook("protect-secrets", "Read|Edit|Write|Bash"),
            ]
        },
    }
    async with serving(nats_url, workspace, config, {f"{MODULE}.PreToolUse"}) as kernel:
        decision = await kernel.intercept("tool.call", bash("rm -rf ~"), CTX)
        assert isinstance(decision, Cancel) and "rm" in decision.reason, decision
        decision = await kernel.intercept("tool.call", bash("git push --force origin main"), CTX)
        assert isinstance(decision, Cancel), decision
        read_env = {"name": "Read", "input": {"file_path": str(workspace / ".env")}, "id": "toolu_2"}
        decision = await kernel.intercept("tool.call", read_env, CTX)
        assert isinstance(decision, Cancel), decision
        decision = await kernel.intercept("tool.call", bash("ls -la"), CTX)
        assert isinstance(decision, Continue), decision
    assert (home / ".claude" / "hooks-logs").is_dir(), "the scripts logged under the HOME hookbus gave them"


@needs_node
async def test_a_guard_that_cannot_start_refuses_the_call_unless_it_says_continue(
    nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "empty-home"
    home.mkdir()
    config = {
        "hookbus": {"home": str(home)},
        "hooks": {
            "PreToolUse": [node_hook("block-dangerous-commands", "Bash")],
            "PostToolUse": [node_hook("block-dangerous-commands", "Bash")],
        },
    }
    async with serving(nats_url, workspace, config, {f"{MODULE}.PreToolUse", f"{MODULE}.PostToolUse"}) as kernel:
        decision = await kernel.intercept("tool.call", bash("rm -rf ~"), CTX)
        assert isinstance(decision, Cancel) and "fail-closed" in decision.reason, decision
        result = {**bash("ls"), "output": "x", "is_error": False}
        decision = await kernel.intercept("tool.result", result, CTX)
        assert isinstance(decision, Continue), "a PostToolUse hook is fail-open unless it says onFailure: block"
    config["hooks"]["PreToolUse"] = [node_hook("block-dangerous-commands", "Bash", onFailure="continue")]
    parsed = parse(json.dumps(config).encode(), workspace, "claude-hooks.json")
    assert not parsed.fail_closed("PreToolUse") and parse(
        json.dumps({"hooks": {"PreToolUse": [node_hook("x", "Bash")]}}).encode(), workspace, "f"
    ).fail_closed("PreToolUse")


async def test_a_uv_script_runs_as_its_settings_say(nats_url: str, workspace: Path, tmp_path: Path) -> None:
    require_binary("uv")  # the test extra installs it; a laptop without it skips, CI fails
    shutil.copytree(FIXTURES / "project" / ".claude", workspace / ".claude")
    home = tmp_path / "home"
    home.mkdir()
    command = "uv run $CLAUDE_PROJECT_DIR/.claude/hooks/pre_tool_use.py"
    config = {"hookbus": {"home": str(home)}, "hooks": {"PreToolUse": [{"matcher": "", "hooks": [
        {"type": "command", "command": command, "timeout": 60}]}]}}  # fmt: skip
    async with serving(nats_url, workspace, config, {f"{MODULE}.PreToolUse"}) as kernel:
        decision = await kernel.intercept("tool.call", bash("rm -rf /tmp/x"), CTX)
        assert isinstance(decision, Cancel) and "rm" in decision.reason.lower(), decision
        decision = await kernel.intercept("tool.call", bash("echo hi"), CTX)
        assert isinstance(decision, Continue), decision


def test_a_whole_settings_json_is_read_for_its_hooks_and_unknown_events_are_logged(workspace: Path) -> None:
    settings = json.loads((FIXTURES / "project" / ".claude" / "settings.json").read_text())
    settings["hooks"]["SomeFutureEvent"] = [{"hooks": [{"type": "command", "command": "true"}]}]
    hooks = parse(json.dumps(settings).encode(), workspace, "settings.json")
    assert set(hooks.events) >= {"PreToolUse", "PostToolUse", "UserPromptSubmit"}
    assert "SomeFutureEvent" in hooks.unknown and "Stop" in hooks.unstaged
    assert hooks.events["PreToolUse"][0].commands[0].argv[2] == f"{workspace}/.claude/hooks/pre_tool_use.py"


@needs_node
async def test_plugins_copied_unchanged_are_served(nats_url: str, workspace: Path, tmp_path: Path) -> None:
    plugins = workspace / "claude-plugins"
    for name in ("hookify", "block-dangerous-commands"):
        shutil.copytree(FIXTURES / "plugins" / name, plugins / name)
    (workspace / ".claude").mkdir()
    shutil.copy(FIXTURES / "plugins/hookify/examples/dangerous-rm.local.md", workspace / ".claude/hookify.rm.local.md")
    wanted = {"claude-plugin-hookify.PreToolUse", "claude-plugin-block-dangerous-commands.PreToolUse"}
    async with Bus(nats_url, name="claude-plugins") as serve, Bus(nats_url, trust_new=True) as kernel:
        server = ClaudePluginsServer(serve, workspace, nats_url)
        await server.start()
        try:
            await approved(kernel, wanted)
            decision = await kernel.intercept("tool.call", bash("rm -rf build"), CTX)
            assert isinstance(decision, Cancel), decision
            decision = await kernel.intercept("tool.call", bash("ls"), CTX)
            assert isinstance(decision, Continue), decision
            decision = await kernel.intercept("user.message", {"agent": "eva", "content": "hello"}, CTX)
            assert not isinstance(decision, Cancel), "hookify's prompt hook lets a plain prompt through"
        finally:
            await server.stop()


async def test_a_bash_guard_in_a_whole_settings_json_blocks_and_asks(nats_url: str, workspace: Path) -> None:
    """sethdf/lifemaestro's .claude/ copied as it is: its settings.json (permissions and all) is the file."""
    shutil.copytree(FIXTURES / "lifemaestro" / ".claude", workspace / ".claude")
    shutil.copy(workspace / ".claude" / "settings.json", workspace / "claude-hooks.json")
    config = json.loads((workspace / "claude-hooks.json").read_text())
    wanted = {f"{MODULE}.PreToolUse", f"{MODULE}.PostToolUse"}
    async with serving(nats_url, workspace, config, wanted) as kernel:
        decision = await kernel.intercept("tool.call", bash("rm -rf ~"), CTX)
        assert isinstance(decision, Cancel) and "BLOCKED" in decision.reason, decision
        decision = await answered(kernel, nats_url, bash("git push --force origin main"), "CONFIRM", "deny")
        assert isinstance(decision, Cancel) and "denied by operator" in decision.reason, "its ask, denied"
        decision = await kernel.intercept("tool.call", bash("ls -la"), CTX)
        assert isinstance(decision, Continue), decision


ASK = """
import json, sys
json.load(sys.stdin)
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",
                                         "permissionDecisionReason": "confirm this"}}))
"""


async def answered(kernel: Bus, nats_url: str, call: dict[str, Any], reason: str, kind: str) -> Any:
    """The decision of ``call`` once its ask (whose reason holds ``reason``) is answered ``kind`` by an operator."""
    intercept = asyncio.create_task(kernel.intercept("tool.call", call, CTX))
    async with Bus(nats_url, name="operator") as op:
        store = AskStore(op.port)
        found: list[Any] = []

        async def asked() -> bool:
            found[:] = [p.ask for p in await store.pending() if p.ask.payload == call and reason in p.ask.reason]
            return bool(found)

        await wait_until(asked, what="the hook's ask")
        await store.answer(found[0].id, kind, "operator", reason="not now" if kind == "deny" else None)
    return await intercept


async def test_ask_from_a_script_is_held_for_an_operator(nats_url: str, workspace: Path) -> None:
    (workspace / "ask.py").write_text(ASK)
    config = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": f"{sys.executable} $CLAUDE_PROJECT_DIR/ask.py"}]}]}}  # fmt: skip
    async with serving(nats_url, workspace, config, {f"{MODULE}.PreToolUse"}) as kernel:
        decision = await answered(kernel, nats_url, bash("ls"), "confirm this", "deny")
        assert isinstance(decision, Cancel) and decision.reason == "denied by operator: not now", decision
        assert await answered(kernel, nats_url, bash("pwd"), "confirm this", "allow") == Continue()


def test_a_context_only_answer_lets_the_prompt_through_with_its_context() -> None:
    hook = parse_input(json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "hello", "session_id": "s"}))
    step = plan(hook, "claude-code")
    answer = ClaudeCodeDialect().answer(step, Patch({**step.payload, "content": "hello\n\nProject rule: English."}))
    assert answer.output == {
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "Project rule: English."}
    }
    rewritten = ClaudeCodeDialect().answer(step, Patch({**step.payload, "content": "h***o"}))
    assert rewritten.output is not None and rewritten.output.get("decision") == "block"


def test_permission_requests_and_new_events_map() -> None:
    raw = {"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    step = plan(parse_input(json.dumps(raw)), "claude-code")
    assert step.stage == "tool.call"
    denied = ClaudeCodeDialect().answer(step, Cancel("no"))
    assert denied.output is not None and denied.output["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    failure = {"hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_input": {}, "error": "boom"}
    step = plan(parse_input(json.dumps(failure)), "claude-code")
    assert step.stage == "tool.result" and step.payload["is_error"] and step.payload["output"] == "boom"
    assert custom_subject("PostCompact") == "eva.custom.claude.post_compact"
    step = plan(parse_input(json.dumps({"hook_event_name": "TaskCreated", "session_id": "s"})), "claude-code")
    assert step.events[0][0] == "eva.custom.claude.task_created"


def project_settings(workspace: Path, fixture: str, events: tuple[str, ...] = ("PreToolUse",)) -> dict[str, Any]:
    """A project's ``.claude/`` copied into the workspace; its settings.json's hooks of ``events`` as the file."""
    shutil.copytree(FIXTURES / fixture / ".claude", workspace / ".claude")
    settings = json.loads((workspace / ".claude" / "settings.json").read_text())
    return {"hooks": {event: settings["hooks"][event] for event in events}}


async def test_a_bash_guard_reading_one_line_of_stdin_blocks_by_exit_2(nats_url: str, workspace: Path) -> None:
    """npelloux/living-architecture: ``$CLAUDE_PROJECT_DIR/.claude/hooks/...sh``, ``read -r input``, exit 2."""
    require_binary("jq")
    config = project_settings(workspace, "living-architecture")
    async with serving(nats_url, workspace, config, {f"{MODULE}.PreToolUse"}) as kernel:
        decision = await kernel.intercept("tool.call", bash("git commit --no-verify -m x"), CTX)
        assert isinstance(decision, Cancel) and "bypasses safety checks" in decision.reason, decision
        decision = await kernel.intercept("tool.call", bash("git reset --hard HEAD~1"), CTX)
        assert isinstance(decision, Cancel), decision
        decision = await kernel.intercept("tool.call", bash("git status"), CTX)
        assert isinstance(decision, Continue), decision


async def test_a_bash_guard_answering_the_older_decision_block_refuses(nats_url: str, workspace: Path) -> None:
    """brandonbryant12/content-studio: ``.claude/hooks/block-env-edit.sh`` prints ``{"decision":"block"}``, exit 0."""
    require_binary("jq")
    config = project_settings(workspace, "content-studio")
    async with serving(nats_url, workspace, config, {f"{MODULE}.PreToolUse"}) as kernel:
        edit = {"name": "Edit", "input": {"file_path": str(workspace / ".env.local"), "old_string": "a",
                                         "new_string": "b"}, "id": "toolu_3"}  # fmt: skip
        decision = await kernel.intercept("tool.call", edit, CTX)
        assert isinstance(decision, Cancel) and "Cannot modify .env files" in decision.reason, decision
        write = {"name": "Write", "input": {"file_path": str(workspace / "src/app.ts"), "content": "x"}, "id": "t4"}
        decision = await kernel.intercept("tool.call", write, CTX)
        assert isinstance(decision, Continue), decision
        decision = await kernel.intercept("tool.call", bash("cat .env"), CTX)
        assert isinstance(decision, Continue), "its matcher is Edit|Write: a Bash call does not run it"


async def test_a_bash_guard_run_by_a_relative_path_blocks_with_its_stderr(nats_url: str, workspace: Path) -> None:
    """iankiku/claude-code-team: ``.claude/hooks/validate-command.sh`` (its settings.local.json), exit 2."""
    require_binary("jq")
    shutil.copytree(FIXTURES / "claude-code-team" / ".claude", workspace / ".claude")
    config = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": ".claude/hooks/validate-command.sh"}]}]}}  # fmt: skip
    async with serving(nats_url, workspace, config, {f"{MODULE}.PreToolUse"}) as kernel:
        for command in ("git push --force origin main", "rm -rf /", "psql -c 'DROP TABLE users'"):
            decision = await kernel.intercept("tool.call", bash(command), CTX)
            assert isinstance(decision, Cancel) and "Destructive command" in decision.reason, (command, decision)
        decision = await kernel.intercept("tool.call", bash("git push origin feature"), CTX)
        assert isinstance(decision, Continue), decision


REWRITE_OUTPUT = """
import json, sys
hook = json.load(sys.stdin)
assert hook["hook_event_name"] == "PostToolUse" and hook["tool_response"] == "secret=hunter2"
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": "secret=[redacted]"}}))
"""

ALLOW_REWRITTEN = """
import json, sys
hook = json.load(sys.stdin)
command = hook["tool_input"]["command"]
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {
    "behavior": "allow", "updatedInput": {"command": command.replace("--force", "--force-with-lease")}}}}))
"""


async def test_updated_tool_output_from_a_post_tool_use_hook_changes_the_result(nats_url: str, workspace: Path) -> None:
    (workspace / "redact.py").write_text(REWRITE_OUTPUT)
    config = {"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": f"{sys.executable} $CLAUDE_PROJECT_DIR/redact.py"}]}]}}  # fmt: skip
    async with serving(nats_url, workspace, config, {f"{MODULE}.PostToolUse"}) as kernel:
        result = {**bash("cat config"), "output": "secret=hunter2", "is_error": False}
        decision = await kernel.intercept("tool.result", result, CTX)
        assert isinstance(decision, Patch) and decision.payload["output"] == "secret=[redacted]", decision


async def test_a_permission_request_allowed_with_updated_input_runs_the_new_input(
    nats_url: str, workspace: Path
) -> None:
    (workspace / "allow.py").write_text(ALLOW_REWRITTEN)
    config = {"hooks": {"PermissionRequest": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": f"{sys.executable} $CLAUDE_PROJECT_DIR/allow.py"}]}]}}  # fmt: skip
    async with serving(nats_url, workspace, config, {f"{MODULE}.PermissionRequest"}) as kernel:
        decision = await kernel.intercept("tool.call", bash("git push --force origin feature"), CTX)
        assert isinstance(decision, Patch), decision
        assert decision.payload["input"] == {"command": "git push --force-with-lease origin feature"}, decision


async def test_a_bash_prompt_hook_that_only_records_lets_the_prompt_through(
    nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    """openshift-eng/ai-helpers: ``/home/USERNAME/.claude/session-prompt-hook.sh`` on UserPromptSubmit, no output."""
    require_binary("jq")
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / "ai-helpers-home", home)
    session = f"s-community-{tmp_path.name}"
    recorded = Path(f"/tmp/prompts-{session}.txt")  # where the script writes, as it does under Claude Code
    recorded.unlink(missing_ok=True)
    config = {"hookbus": {"home": str(home)}, "hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": f"{home}/.claude/session-prompt-hook.sh"}]}]}}  # fmt: skip
    try:
        async with serving(nats_url, workspace, config, {f"{MODULE}.UserPromptSubmit"}) as kernel:
            prompt = {"agent": "eva", "content": "fix the\nflaky test"}
            decision = await kernel.intercept("user.message", prompt, {**CTX, "session": session})
            assert isinstance(decision, Continue), decision
        assert recorded.read_text() == "fix the flaky test \n", "the script saw the prompt and the session"
    finally:
        recorded.unlink(missing_ok=True)


async def test_a_prompt_hook_that_never_reads_stdin_and_says_a_system_message_passes_the_prompt(
    nats_url: str, workspace: Path, tmp_path: Path
) -> None:
    """ryanshepps/claude: its whole settings.json, ``$HOME/.claude/hooks/run-commands-yourself.sh``."""
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / "ryanshepps-home", home)
    config = json.loads((home / ".claude" / "settings.json").read_text())
    config["hookbus"] = {"home": str(home), "onFailure": "block"}  # a broken pipe read as a failure would refuse
    async with serving(nats_url, workspace, config, {f"{MODULE}.UserPromptSubmit"}) as kernel:
        big = {"agent": "eva", "content": "x" * 300_000}  # more than a pipe holds, and the script reads none of it
        for prompt in ({"agent": "eva", "content": "run the tests"}, big):
            decision = await kernel.intercept("user.message", prompt, CTX)
            assert isinstance(decision, Continue), "a systemMessage is shown to the user, never added to the prompt"


def test_a_hooks_file_with_its_events_at_the_top_level_is_refused_as_claude_code_refuses_it(
    workspace: Path,
) -> None:
    """ramirlm/ramir-cc-marketplace's plugin hooks.json: Claude Code fails to load it; served as no hooks, its guards
    (block-rm-commands.sh and the others) would silently not run."""
    plugin = FIXTURES / "flat-plugin" / "personal-workspace-setup"
    data = (plugin / "hooks" / "hooks.json").read_bytes()
    with pytest.raises(
        ConfigError, match=r'Notification, PreToolUse, SessionStart, Stop must be under a top-level "hooks"'
    ):
        parse(data, workspace, "hooks.json", plugin)
    assert parse(b'{"permissions": {}}', workspace, "settings.json").events == {}, "a file of no hooks is no error"
