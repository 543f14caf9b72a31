"""Running Claude Code command hooks on a stage: its input on stdin, its exit code and JSON output as a decision.

Each command runs as shell hooks do (bus/_sandbox/process.py): no
shell, its own process group, an environment built from nothing (a safe
``PATH``, ``HOME``, ``CLAUDE_PROJECT_DIR``, a plugin's ``CLAUDE_PLUGIN_ROOT``,
``HOOKBUS_DEPTH`` one above the call's, ``NATS_URL`` without credentials), the
workspace as its directory, its timeout enforced (TERM, then KILL after the
grace), bounded output. The matching commands of one call run at once, as
Claude Code runs them, and their answers are read as Claude Code reads them:

- exit 2: ``deny``, stderr the reason;
- exit 0 and a JSON object on stdout: ``hookSpecificOutput.permissionDecision``
  (``allow|deny|ask|defer``, reason ``permissionDecisionReason``), a
  PermissionRequest's ``decision.behavior`` (``allow|deny``, ``message``),
  ``decision: "block"`` (``reason``), ``continue: false`` (``stopReason``);
  ``updatedInput`` patches the tool's input; ``updatedToolOutput`` (or
  ``updatedMCPToolOutput``) the result; ``additionalContext`` (or, for a
  prompt, plain stdout) is added to the prompt or the result, never a refusal;
  ``systemMessage`` is logged; ``suppressOutput`` and ``updatedPermissions``
  have nothing to act on here;
- the decisions of the commands combine deny > defer > ask > allow
  (:func:`bus.adapters.claude_code._hook_rules.strongest`); ``ask`` is an :class:`~bus.Ask`:
  the call is held until an operator answers (``hookbus allow``), and its
  deadline applies the asking command's fail mode; ``defer`` waits for someone
  hookbus cannot reach, so it is read through that fail mode at once:
  fail-closed refuses, fail-open goes on (logged);
- any other exit, a timeout, a command that cannot start: a fault of that
  command, read through its fail mode (see :mod:`bus.adapters.claude_code._command_file`).

Every refusal's reason names the command and, for a fault, its fail mode, so
the journal says which.
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

from bus._core.decisions import Ask, Cancel, Continue, Decision, HandlerDecision, Patch
from bus._core.depth import DEPTH_ENV, child_depth
from bus._sandbox.process import DEFAULT_KILL_GRACE, kill_group, spawn
from bus._sandbox.security import nul_problem, public_url, safe_path
from bus.adapters.claude_code._command_file import Command, Places
from bus.adapters.claude_code._hook_rules import Permission, permission_of, strongest

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


def environment(places: Places | Path, depth: int, nats_url: str | None) -> dict[str, str]:
    """The hook's environment, built from nothing: what Claude Code gives its hooks, and hookbus's own."""
    if isinstance(places, Path):
        places = Places(places, Path.home())
    env = {"PATH": safe_path(), **places.variables(), DEPTH_ENV: str(child_depth(depth))}
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
        why = getattr(exc, "strerror", None) or exc
        return Run(command.text, None, problem=f"cannot start {command.argv[0]!r}: {why}")
    started = time.monotonic()
    try:
        code = await asyncio.wait_for(asyncio.shield(proc.wait()), command.timeout)
    except TimeoutError:
        kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), DEFAULT_KILL_GRACE)
        except TimeoutError:
            kill_group(proc.pid, signal.SIGKILL)
            await proc.wait()
        proc.close()
        return Run(command.text, None, problem=f"timed out after {command.timeout:g}s")
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


@dataclass
class Verdict:
    """What one command's run says, as Claude Code reads it."""

    command: Command
    permission: Permission | None = None
    reason: str = ""
    stop: str | None = None  # continue: false
    fault: str | None = None  # it could not run, timed out, or exited other than 0 or 2
    updated_input: dict[str, Any] | None = None
    updated_output: Any = None
    context: str | None = None
    system_message: str | None = None


def _reason(value: Any, fallback: str) -> str:
    return str(value) if isinstance(value, str) and value else fallback


def read(command: Command, run: Run, event: str) -> Verdict:
    """``run`` of ``command`` on ``event`` as a verdict."""
    verdict = Verdict(command)
    if run.problem is not None:
        verdict.fault = run.problem
        return verdict
    if run.exit_code == BLOCK_EXIT:
        verdict.permission, verdict.reason = "deny", _text(run.stderr) or f"blocked by {run.command}"
        return verdict
    if run.exit_code != 0:
        verdict.fault = f"exited {run.exit_code}: {_text(run.stderr)[-500:]}".rstrip(": ")
        return verdict
    output = _json(run.stdout)
    if output is None:
        if event == "UserPromptSubmit":
            verdict.context = _text(run.stdout) or None  # a prompt hook's plain stdout is context
        return verdict
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    if output.get("continue") is False:
        verdict.stop = _reason(output.get("stopReason"), f"stopped by {run.command}")
    if isinstance(output.get("systemMessage"), str):
        verdict.system_message = output["systemMessage"]
    top = output.get("decision")
    if top in ("block", "deny"):
        verdict.permission, verdict.reason = "deny", _reason(output.get("reason"), f"blocked by {run.command}")
    elif top == "approve":
        verdict.permission = "allow"
    elif permission_of(top) is not None:  # the older top-level form: {"decision": "ask", "reason": ...}
        verdict.permission, verdict.reason = (
            permission_of(top),
            _reason(output.get("reason"), f"{top} from {run.command}"),
        )
    asked = permission_of(specific.get("permissionDecision"))
    if asked is not None:
        verdict.permission = strongest([verdict.permission, asked])
        if asked == verdict.permission:
            verdict.reason = _reason(specific.get("permissionDecisionReason"), f"{asked} from {run.command}")
    behavior = specific.get("decision")
    if isinstance(behavior, dict):  # PermissionRequest: {behavior, message, updatedInput, updatedPermissions}
        chosen = permission_of(behavior.get("behavior"))
        if chosen is not None:
            verdict.permission = strongest([verdict.permission, chosen])
            if chosen == verdict.permission:
                verdict.reason = _reason(behavior.get("message"), f"{chosen} from {run.command}")
        if isinstance(behavior.get("updatedInput"), dict):
            verdict.updated_input = behavior["updatedInput"]
    if isinstance(specific.get("updatedInput"), dict):
        verdict.updated_input = specific["updatedInput"]
    for key in ("updatedToolOutput", "updatedMCPToolOutput"):
        if key in specific:
            verdict.updated_output = specific[key]
    context = specific.get("additionalContext")
    if isinstance(context, str) and context:
        verdict.context = context
    return verdict


def _cancel(verdict: Verdict, what: str) -> Cancel:
    return Cancel(f"{verdict.command.text}: {what}")


def decide(
    stage: str, payload: dict[str, Any], runs: list[Run], event: str = "", commands: list[Command] | None = None
) -> HandlerDecision:
    """The decision of the runs of one call (``commands[i]`` ran as ``runs[i]``), in configuration order."""
    if commands is None:
        commands = [Command(r.command, (r.command,), 0.0) for r in runs]
    event = event or {"tool.call": "PreToolUse", "tool.result": "PostToolUse"}.get(stage, "UserPromptSubmit")
    verdicts = [read(command, run, event) for command, run in zip(commands, runs, strict=True)]
    decision = strongest(v.permission for v in verdicts)
    if decision == "deny":  # a hook's own refusal is the reason shown, before any other's fault
        return Cancel(next(v.reason for v in verdicts if v.permission == "deny"))
    for verdict in verdicts:
        if verdict.system_message:
            log.info("claude hook %r on %s says: %s", verdict.command.text, stage, verdict.system_message)
        if verdict.fault is None:
            continue
        if verdict.command.fail_closed:
            return _cancel(verdict, f"the hook failed ({verdict.fault}); it is fail-closed, so the call is refused")
        what = verdict.command.text
        log.warning("claude hook %r on %s: %s (fail-open: the call goes on)", what, stage, verdict.fault)
    for verdict in verdicts:
        if verdict.stop is not None:
            return _cancel(verdict, verdict.stop)
    if decision == "ask":  # held for an operator, about the call as the hooks left it
        asking = [v for v in verdicts if v.permission == "ask"]
        strict = any(v.command.fail_closed for v in asking)
        passed = _patched(stage, payload, verdicts)
        asked = passed.payload if isinstance(passed, Patch) else None
        reason = f"{asking[0].command.text}: {asking[0].reason}"
        return Ask(reason, on_timeout="cancel" if strict else "continue", payload=asked)
    if decision == "defer":
        waiting = [v for v in verdicts if v.permission == decision]
        closed = [v for v in waiting if v.command.fail_closed]
        if closed:
            return _cancel(closed[0], f"{decision}s for a decision nobody here can give ({closed[0].reason}); "
                           "it is fail-closed, so the call is refused")  # fmt: skip
        for verdict in waiting:
            log.warning("claude hook %r on %s: %s with nobody to answer (fail-open: the call goes on)",
                        verdict.command.text, stage, decision)  # fmt: skip
    return _patched(stage, payload, verdicts)


def _patched(stage: str, payload: dict[str, Any], verdicts: list[Verdict]) -> Decision:
    patched = dict(payload)
    contexts = [v.context for v in verdicts if v.context]
    for verdict in verdicts:
        if stage == "tool.call" and verdict.updated_input is not None:
            patched["input"] = verdict.updated_input
        if stage == "tool.result" and verdict.updated_output is not None:
            output = verdict.updated_output
            patched["output"] = output if isinstance(output, str) else orjson.dumps(output).decode()
    if contexts:
        text = "\n".join(contexts)
        if stage == "tool.result":
            patched["remark"] = f"{patched['remark']}\n{text}" if "remark" in patched else text
        elif stage == "user.message":  # appended, never replacing: the prompt goes through with it
            patched["content"] = f"{patched.get('content', '')}\n\n{text}"
        else:
            patched["context"] = f"{patched['context']}\n{text}" if isinstance(patched.get("context"), str) else text
    return Continue() if patched == payload else Patch(patched)
