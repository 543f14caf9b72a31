"""``hookbus codex-hook``: Codex's hook inputs, in the shapes its hook documentation and input schemas describe
(Claude Code's fields plus ``turn_id`` and ``model``), answered in the output Codex accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bus import Bus

from . import test_claude_code as claude
from .conftest import run_cli
from .test_claude_code import denial, env_for, run_hook

#: The guard module and the relay of tests/test_claude_code.py, shared.
guarded, relay = claude.guarded, claude.relay

SESSION = "019a2c4e-codex-session"
SECRETS = "no secrets in prompts"


def codex_input(event: str, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": SESSION,
        "turn_id": "turn-7",
        "transcript_path": None,
        "cwd": "/srv/app",
        "hook_event_name": event,
        "model": "gpt-5-codex",
        "permission_mode": "default",
        **fields,
    }


def shell(command: str) -> dict[str, Any]:
    return codex_input("PreToolUse", tool_name="Bash", tool_input={"command": command}, tool_use_id="call_1")


async def codex_hook(payload: Any, env: dict[str, str]) -> tuple[int, Any, str]:
    return await run_hook("codex-hook", payload, env)


async def test_codex_calls_are_denied_and_a_changed_input_is_a_denial_naming_it(
    nats_url: str, relay: Bus, guarded: str, tmp_path: Path
) -> None:
    env = env_for(nats_url, tmp_path)
    code, output, _ = await codex_hook(shell("rm -rf /srv"), env)
    assert code == 0 and denial(output) == f"hookbus ({guarded}.no_rm): only by hand"
    assert set(output) == {"hookSpecificOutput"}, "Codex fails a hook whose output has fields it does not know"
    code, output, _ = await codex_hook(shell("ls"), env)
    assert code == 0
    assert denial(output) == 'hookbus: a guard changed this call\'s input; call the tool with {"command":"ls -la"}'
    code, output, stderr = await codex_hook(shell("pwd"), env)
    assert (code, output, stderr) == (0, None, ""), "allowed: no output, Codex's own approval flow applies"
    code, output, _ = await codex_hook(codex_input("UserPromptSubmit", prompt="key sk-123"), env)
    assert code == 0 and output == {
        "decision": "block",
        "reason": f"hookbus ({guarded}.no_secret): no secrets in prompts",
    }


def test_codex_install_configures_the_events_codex_documents(tmp_path: Path) -> None:
    done = run_cli("codex-hook", "install", "--fail-closed")
    assert done.returncode == 0, done.stderr
    hooks = json.loads(done.stdout)["hooks"]
    assert list(hooks) == ["SessionStart", "PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop"]
    assert hooks["PreToolUse"][0]["hooks"][0]["command"].endswith(" codex-hook --fail-closed")
    done = run_cli("codex-hook", "install", "--http", "http://127.0.0.1:8477")
    assert done.returncode == 1 and "Codex has no http hook type" in done.stderr
