"""Running Claude Code command hooks on a stage: its input on stdin, its exit code and JSON output as a decision.

Each command runs as shell hooks do (subscribers/shell_hooks/process.py): no
shell, its own process group, an environment built from nothing (a safe
``PATH``, ``CLAUDE_PROJECT_DIR``, ``HOOKBUS_DEPTH`` one above the call's,
``NATS_URL`` without credentials), the workspace as its directory, its
timeout enforced (TERM, then KILL after the grace), bounded output. The
matching commands of one call run at once, as Claude Code runs them, and the
decision is read as Claude Code reads it:

- exit 2: the call is refused with stderr as the reason;
- exit 0 and a JSON object on stdout: ``hookSpecificOutput.permissionDecision``
  ``deny`` (reason ``permissionDecisionReason``), ``decision: "block"``
  (reason ``reason``) or ``continue: false`` (``stopReason``) refuse;
  ``updatedInput`` patches the tool's input; ``additionalContext`` (or, for a
  prompt, plain stdout) is added to the result or prompt;
- any other exit, a timeout, a command that cannot start: a non-blocking
  error, logged, and the call goes on (Claude Code's own reading).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from bus.core.decisions import Cancel, Continue, Decision, Patch
from bus.core.depth import DEPTH_ENV, child_depth
from subscribers.claude_hooks.config import PROJECT_VARIABLE, Command
from subscribers.shell_hooks.limits import DEFAULT_KILL_GRACE
from subscribers.shell_hooks.process import spawn
from subscribers.shell_hooks.security import nul_problem, public_url, safe_path
from subscribers.shell_hooks.shell import kill_group

log = logging.getLogger("hookbus.claude_hooks")

#: Bytes of each output stream kept: a decision is a small JSON object.
OUTPUT_LIMIT: Final = 64 * 1024
#: Seconds to read what a finished hook left in its pipes.
_LINGER: Final = 1.0
#: The exit code Claude Code reads as "refuse".
BLOCK_EXIT: Final = 2


@dataclass(frozen=True)
class Run:
    """What one command did."""

    command: str
    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    problem: str | None = None  # it could not run, or timed out


def environment(project: Path, depth: int, nats_url: str | None) -> dict[str, str]:
    env = {"PATH": safe_path(), PROJECT_VARIABLE: str(project), DEPTH_ENV: str(child_depth(depth))}
    if nats_url:
        env["NATS_URL"] = public_url(nats_url)
    return env


async def run_command(command: Command, stdin: bytes, project: Path, env: dict[str, str]) -> Run:
    """Run one command hook to its end or its timeout; never raises for the command's own trouble."""
    refused = nul_problem(command.argv, env)
    if refused is not None:
        return Run(command.text, None, problem=f"not run: {refused}")
    try:
        proc = spawn(command.argv, env=env, cwd=project, stdin_data=stdin, output_limit=OUTPUT_LIMIT)
    except (OSError, ValueError) as exc:
        return Run(command.text, None, problem=f"cannot start: {getattr(exc, 'strerror', None) or exc}")
    started = time.monotonic()
    try:
        code = await asyncio.wait_for(asyncio.shield(proc.wait()), command.timeout_s)
    except TimeoutError:
        kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), DEFAULT_KILL_GRACE)
        except TimeoutError:
            kill_group(proc.pid, signal.SIGKILL)
            await proc.wait()
        proc.close()
        return Run(command.text, None, problem=f"timed out after {command.timeout_s:g}s")
    except BaseException:  # cancelled: leave nothing running, nothing unreaped
        kill_group(proc.pid, signal.SIGKILL)
        proc.reap()
        proc.close()
        raise
    await proc.finish_output(_LINGER)
    kill_group(proc.pid, signal.SIGKILL)  # what the hook left running in its group goes with it
    proc.close()
    log.debug("claude hook %r exited %s after %.3fs", command.text, code, time.monotonic() - started)
    return Run(command.text, code, bytes(proc.stdout.data), bytes(proc.stderr.data))


def _json(stdout: bytes) -> dict[str, Any] | None:
    try:
        data = orjson.loads(stdout)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _text(data: bytes) -> str:
    return data.decode(errors="replace").strip()


def refusal(run: Run) -> str | None:
    """Why ``run`` refuses the call, or None."""
    if run.exit_code == BLOCK_EXIT:
        return _text(run.stderr) or f"blocked by {run.command}"
    output = _json(run.stdout) if run.exit_code == 0 else None
    if output is None:
        return None
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    if specific.get("permissionDecision") == "deny":
        return str(specific.get("permissionDecisionReason") or f"denied by {run.command}")
    if output.get("decision") in ("block", "deny"):
        return str(output.get("reason") or f"blocked by {run.command}")
    if output.get("continue") is False:
        return str(output.get("stopReason") or f"stopped by {run.command}")
    return None


def _specific(run: Run, key: str) -> Any:
    output = _json(run.stdout) if run.exit_code == 0 else None
    specific = output.get("hookSpecificOutput") if output else None
    return specific.get(key) if isinstance(specific, dict) else None


def decide(stage: str, payload: dict[str, Any], runs: list[Run]) -> Decision:
    """The decision of the runs of one call, in configuration order: a refusal wins, then the patches."""
    for run in runs:
        if run.problem is not None or run.exit_code not in (0, BLOCK_EXIT):
            why = run.problem or f"exited {run.exit_code}: {_text(run.stderr)[-500:]}"
            log.warning("claude hook %r on %s: %s (a non-blocking error: the call goes on)", run.command, stage, why)
        reason = refusal(run)
        if reason is not None:
            return Cancel(reason)
    patched = dict(payload)
    for run in runs:
        new_input = _specific(run, "updatedInput")
        if stage == "tool.call" and isinstance(new_input, dict):
            patched["input"] = new_input
        context = _specific(run, "additionalContext")
        if context is None and stage == "user.message" and run.exit_code == 0 and _json(run.stdout) is None:
            context = _text(run.stdout) or None  # a prompt hook's plain stdout is context
        if isinstance(context, str) and context:
            if stage == "tool.result":
                patched["remark"] = f"{patched['remark']}\n{context}" if "remark" in patched else context
            elif stage == "user.message":
                patched["content"] = f"{patched.get('content', '')}\n\n{context}"
    return Continue() if patched == payload else Patch(patched)
