"""claude-hooks.json: unchanged Claude Code command hooks as middleware handlers on a real bus.

The hook scripts below are written to Claude Code's documented protocol (the
hook input as JSON on stdin; exit 2 with the reason on stderr refuses; exit 0
with a JSON object on stdout: ``hookSpecificOutput.permissionDecision``,
``permissionDecisionReason``, ``updatedInput``, ``additionalContext``,
``decision: "block"`` with ``reason``), and know nothing of hookbus.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Cancel, Continue, Patch
from bus._core.errors import ConfigError
from bus.adapters.claude_code._command_file import parse
from bus.adapters.claude_code.command_modules import MODULE, ClaudeHooksServer
from tests.conftest import hookbus_cmd

BLOCK_RM = """
import json, sys
call = json.load(sys.stdin)
assert call["hook_event_name"] == "PreToolUse" and call["session_id"] == "s-claude"
if "rm -rf" in call["tool_input"].get("command", ""):
    print("Blocked: rm -rf is not allowed", file=sys.stderr)
    sys.exit(2)
"""
REWRITE_LS = """
import json, sys
call = json.load(sys.stdin)
command = call["tool_input"].get("command", "")
if command == "ls":
    out = {"hookEventName": "PreToolUse", "updatedInput": {**call["tool_input"], "command": "ls -la"}}
    print(json.dumps({"hookSpecificOutput": out}))
"""
DENY_WRITES = """
import json, sys
call = json.load(sys.stdin)
reason = "writes to " + call["tool_input"]["file_path"] + " need a review"
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                         "permissionDecisionReason": reason}}))
"""
PROMPTS = """
import json, sys
call = json.load(sys.stdin)
if "password" in call["prompt"]:
    print(json.dumps({"decision": "block", "reason": "no passwords in prompts"}))
else:
    print("Project rule: answer in English.")
"""
RESULTS = """
import json, sys
call = json.load(sys.stdin)
note = "checked " + call["tool_name"] + " output of " + str(len(call["tool_response"])) + " chars"
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": note}}))
"""
SLOW = "import time\ntime.sleep(30)\n"


def command(script: str) -> str:
    return f'{sys.executable} "$CLAUDE_PROJECT_DIR"/hooks/{script}.py'


def claude_hooks() -> dict[str, Any]:
    """A claude-hooks.json in Claude Code's own format."""

    def group(matcher: str | None, *hooks: dict[str, Any]) -> dict[str, Any]:
        return {**({"matcher": matcher} if matcher is not None else {}), "hooks": list(hooks)}

    def hook(script: str, timeout: float = 10, **more: Any) -> dict[str, Any]:
        return {"type": "command", "command": command(script), "timeout": timeout, **more}

    return {
        "hooks": {
            "PreToolUse": [
                group("Bash", hook("block_rm"), hook("rewrite_ls"), hook("slow", timeout=0.5, onFailure="continue")),
                group("Write|Edit", hook("deny_writes")),
            ],
            "UserPromptSubmit": [group(None, hook("prompts"))],
            "PostToolUse": [group("*", hook("results"))],
            "Stop": [group(None, hook("prompts"))],
        }
    }


@pytest.fixture
async def kernel_with_hooks(nats_url: str, workspace: Path) -> AsyncIterator[Bus]:
    """claude-hooks.json served from ``workspace``; yields a kernel that trusts new handlers."""
    (workspace / "hooks").mkdir()
    scripts = {"block_rm": BLOCK_RM, "rewrite_ls": REWRITE_LS, "deny_writes": DENY_WRITES}
    scripts |= {"prompts": PROMPTS, "results": RESULTS, "slow": SLOW}
    for name, text in scripts.items():
        (workspace / "hooks" / f"{name}.py").write_text(text)
    (workspace / "claude-hooks.json").write_text(json.dumps(claude_hooks()))
    async with Bus(nats_url, name="claude-hooks") as serving, Bus(nats_url, trust_new=True) as kernel:
        server = ClaudeHooksServer(serving, workspace, nats_url)
        await server.start()
        try:
            await approved(kernel, {f"{MODULE}.PreToolUse", f"{MODULE}.UserPromptSubmit", f"{MODULE}.PostToolUse"})
            yield kernel
        finally:
            await server.stop()


CTX = {"session": "s-claude", "agent": "eva"}


async def approved(kernel: Bus, wanted: set[str]) -> None:
    """Wait until ``wanted`` run on ``kernel``, approving them as an operator would (the server is shared:
    an earlier test may have approved another version of the same handler)."""
    view = await kernel.middleware.start()

    def runnable() -> bool:
        links = [link for chain in view.chains.values() for link in chain.links if link.trust.runs]
        return wanted <= {link.decl.qualname for link in links}

    def waiting() -> list[Any]:
        return [link for chain in view.chains.values() for link in chain.waiting if link.decl.qualname in wanted]

    await view.wait_until(lambda: runnable() or bool(waiting()), 20)
    for link in waiting():
        await view.approve(link.decl)
    await view.wait_until(runnable, 20)


async def test_claude_code_hook_scripts_decide_on_their_stages(kernel_with_hooks: Bus) -> None:
    kernel = kernel_with_hooks
    decision = await kernel.intercept("tool.call", {"name": "Bash", "input": {"command": "rm -rf /"}}, CTX)
    assert isinstance(decision, Cancel) and decision.reason == "Blocked: rm -rf is not allowed"
    assert decision.handler == f"{MODULE}.PreToolUse"

    decision = await kernel.intercept("tool.call", {"name": "Bash", "input": {"command": "ls", "n": 1}}, CTX)
    assert isinstance(decision, Patch) and decision.payload["input"] == {"command": "ls -la", "n": 1}
    decision = await kernel.intercept("tool.call", {"name": "Bash", "input": {"command": "pwd"}}, CTX)
    assert isinstance(decision, Continue), "the slow hook timed out: its onFailure says continue"

    decision = await kernel.intercept("tool.call", {"name": "Write", "input": {"file_path": "/etc/x"}}, CTX)
    assert isinstance(decision, Cancel) and decision.reason == "writes to /etc/x need a review"
    decision = await kernel.intercept("tool.call", {"name": "Read", "input": {"file_path": "/etc/x"}}, CTX)
    assert isinstance(decision, Continue), "no matcher wants Read"

    decision = await kernel.intercept("user.message", {"agent": "eva", "content": "my password is x"}, CTX)
    assert isinstance(decision, Cancel) and decision.reason == "no passwords in prompts"
    decision = await kernel.intercept("user.message", {"agent": "eva", "content": "hello"}, CTX)
    assert isinstance(decision, Patch)
    assert decision.payload["content"] == "hello\n\nProject rule: answer in English."

    result = {"name": "Bash", "input": {"command": "pwd"}, "output": "/srv", "is_error": False}
    decision = await kernel.intercept("tool.result", result, CTX)
    assert isinstance(decision, Patch) and decision.payload["output"].startswith("/srv\n\n[hookbus: remark from")
    assert decision.payload["output"].endswith("checked Bash output of 4 chars")


async def test_a_changed_claude_hooks_file_is_served_as_a_changed_handler(
    kernel_with_hooks: Bus, workspace: Path
) -> None:
    kernel = kernel_with_hooks
    view = await kernel.middleware.start()
    before = {link.decl.qualname: link.identity for link in view.chains["tool.call"].links}[f"{MODULE}.PreToolUse"]
    config = claude_hooks()
    config["hooks"]["PreToolUse"] = [
        {"matcher": "Read", "hooks": [{"type": "command", "command": command("deny_writes")}]}
    ]
    (workspace / "claude-hooks.json").write_text(json.dumps(config))

    def waiting() -> Any:
        chain = view.chains.get("tool.call")  # absent for a moment while the new version replaces the old
        return next((link for link in chain.waiting if link.identity != before), None) if chain else None

    await view.wait_until(lambda: waiting() is not None, 15)  # a changed command: a changed handler
    decision = await kernel.intercept("tool.call", {"name": "Read", "input": {"file_path": "/a"}}, CTX)
    assert isinstance(decision, Continue), "not run before an operator approves the change"
    changed = waiting()
    await view.approve(changed.decl)

    def served() -> set[str]:
        chain = view.chains.get("tool.call")
        return (
            {link.identity for link in chain.links if link.decl.qualname == changed.decl.qualname} if chain else set()
        )

    await view.wait_until(lambda: served() == {changed.identity}, 15)  # the old version serves until then
    decision = await kernel.intercept("tool.call", {"name": "Bash", "input": {"command": "rm -rf /"}}, CTX)
    assert isinstance(decision, Continue), "the Bash group is gone"
    decision = await kernel.intercept("tool.call", {"name": "Read", "input": {"file_path": "/a"}}, CTX)
    assert isinstance(decision, Cancel) and decision.reason == "writes to /a need a review"


@pytest.mark.parametrize(
    ("hooks", "named"),
    [
        ({"PreToolUse": [{"hooks": [{"type": "command", "command": "a.sh; rm x"}]}]}, "hooks.PreToolUse[0].hooks[0]"),
        ({"PreToolUse": [{"hooks": [{"type": "command", "command": "$USER/a.sh"}]}]}, "$USER: only $CLAUDE_PROJECT"),
        ({"PreToolUse": [{"hooks": [{"type": "http", "url": "http://x"}]}]}, "hooks.PreToolUse[0].hooks[0].type"),
        ({"PreToolUse": [{"matcher": "(", "hooks": []}]}, "matcher: '(' is not a regular expression"),
        ({"PreToolUse": [{"hooks": [{"type": "command", "command": "a", "timeout": 0}]}]}, "timeout"),
    ],
)
def test_a_claude_hooks_file_breaking_the_rules_is_named(hooks: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(json.dumps({"hooks": hooks}).encode(), Path("/srv"), "claude-hooks.json")
    assert named in str(raised.value) and str(raised.value).startswith("claude-hooks.json")


async def test_the_shell_hook_worker_serves_claude_hooks_json(nats_url: str, workspace: Path) -> None:
    (workspace / "hooks").mkdir()
    (workspace / "hooks" / "block_rm.py").write_text(BLOCK_RM)
    group = {"matcher": "Bash", "hooks": [{"type": "command", "command": command("block_rm")}]}
    (workspace / "claude-hooks.json").write_text(json.dumps({"hooks": {"PreToolUse": [group]}}))
    worker = subprocess.Popen(
        [*hookbus_cmd(), "worker", "--nats-url", nats_url, "--workspace", str(workspace), "--queue", "cc-worker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with Bus(nats_url, trust_new=True) as kernel:
            await approved(kernel, {f"{MODULE}.PreToolUse"})
            decision = await kernel.intercept("tool.call", {"name": "Bash", "input": {"command": "rm -rf ~"}}, CTX)
            assert isinstance(decision, Cancel) and decision.reason == "Blocked: rm -rf is not allowed"
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=20)
        assert worker.returncode == 0, err
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=20)


async def test_a_reload_serves_the_new_version_before_stopping_the_old(kernel_with_hooks: Bus, workspace: Path) -> None:
    """Editing one hook never takes the others out: the registry always holds an instance of claude-hooks."""
    kernel = kernel_with_hooks
    live: set[str] = set()
    emptied: list[str] = []

    async def track(msg: Any) -> None:  # the registry as every kernel's view reads it, in order
        key = msg.subject.rsplit(".", 1)[-1]
        if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            live.discard(key)
            if not live:
                emptied.append(key)
        else:
            live.add(key)

    view = await kernel.middleware.start()
    before = {a.instance for a, _ in view.instances.values() if a.module == MODULE}
    assert len(before) == 1
    live |= before
    await kernel.port.subscribe_raw(f"$KV.hookbus_modules.{MODULE}.>", track)
    await kernel.flush()
    config = claude_hooks()
    config["hooks"]["PostToolUse"] = [{"hooks": [{"type": "command", "command": command("prompts")}]}]
    (workspace / "claude-hooks.json").write_text(json.dumps(config))
    await view.wait_until(lambda: not before & {a.instance for a, _ in view.instances.values()}, 15)
    await kernel.flush()  # the registry's messages so far have reached ``track``
    assert emptied == [], "every instance of claude-hooks was gone for a moment: its hooks did not run"
    decision = await kernel.intercept("tool.call", {"name": "Bash", "input": {"command": "rm -rf /"}}, CTX)
    assert isinstance(decision, Cancel), "the unchanged PreToolUse hook runs on, approved as it was"
