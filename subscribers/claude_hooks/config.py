"""claude-hooks.json: Claude Code's hooks configuration, read as the stages hookbus runs its command hooks on.

The file has Claude Code's own shape, so a team's existing hooks move over
unchanged: ``{"hooks": {event: [{"matcher": ..., "hooks": [{"type":
"command", "command": ..., "timeout": seconds}]}]}}``. ``PreToolUse`` runs on
``tool.call``, ``PostToolUse`` on ``tool.result``, ``UserPromptSubmit`` on
``user.message``. Claude Code's other events have no stage: they are named in
the log and not run. A hook type other than ``command``, a matcher that is
not a regular expression, a command the shell-hook rules refuse (shell
metacharacters, a NUL byte, a ``$`` variable other than
``$CLAUDE_PROJECT_DIR``) is an error naming the file and the place.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from bus.core.config_schema import ClaudeHooksFile, ClaudeMatcherGroup
from bus.core.declaration import MAX_TIMEOUT
from bus.core.errors import ConfigError
from bus.core.schema import convert
from subscribers.shell_hooks.security import command_problem

FILE: Final = "claude-hooks.json"
#: The stage each Claude Code event runs on.
STAGES: Final = {"PreToolUse": "tool.call", "PostToolUse": "tool.result", "UserPromptSubmit": "user.message"}
#: Claude Code's events that have no hookbus stage (accepted, not run).
UNSTAGED: Final = frozenset(
    {
        "PermissionRequest", "PostToolUseFailure", "Notification", "Stop", "SubagentStart", "SubagentStop",
        "PreCompact", "SessionStart", "SessionEnd", "PermissionDenied",
    }
)  # fmt: skip
#: The variable Claude Code gives its hooks for the project's directory; hookbus gives the workspace.
PROJECT_VARIABLE: Final = "CLAUDE_PROJECT_DIR"
#: Seconds the kernel waits beyond a handler's slowest command (the process start, the reply).
MARGIN_S: Final = 2.0
#: A command's timeout is cut to this: no handler may hold an action longer than MAX_TIMEOUT.
COMMAND_TIMEOUT_CAP_S: Final = MAX_TIMEOUT - MARGIN_S
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass(frozen=True)
class Command:
    """One command hook, split into its program and arguments (no shell), and its timeout in seconds."""

    text: str
    argv: tuple[str, ...]
    timeout_s: float


@dataclass(frozen=True)
class Group:
    matcher: str
    pattern: re.Pattern[str] | None  # None: every tool
    commands: tuple[Command, ...]

    def wants(self, tool: str) -> bool:
        return self.pattern is None or self.pattern.fullmatch(tool) is not None


@dataclass(frozen=True)
class ClaudeHooks:
    """The groups of each Claude Code event hookbus runs, in file order."""

    events: dict[str, tuple[Group, ...]]
    unstaged: tuple[str, ...] = ()

    def digest(self, event: str) -> str:
        """What the handler of ``event`` runs, as a digest: a changed command is a changed handler identity."""
        shape = [(g.matcher, [(c.text, c.timeout_s) for c in g.commands]) for g in self.events.get(event, ())]
        return hashlib.sha256(orjson.dumps(shape)).hexdigest()


def split_command(text: str, project: Path, where: str) -> tuple[str, ...]:
    """``text`` as argv, ``$CLAUDE_PROJECT_DIR`` replaced by ``project``; refused as the shell-hook rules say."""
    problem = command_problem(text)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")
    for name in _VARIABLE.findall(text):
        if name != PROJECT_VARIABLE:
            raise ConfigError(f"{where}: ${name}: only ${PROJECT_VARIABLE} is replaced (no shell runs the command)")
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: cannot split the command ({exc})") from None
    return tuple(_VARIABLE.sub(lambda _: str(project), arg) for arg in argv)


def _group(group: ClaudeMatcherGroup, project: Path, where: str) -> Group:
    pattern = None
    if group.matcher not in ("", "*"):
        try:
            pattern = re.compile(group.matcher)
        except re.error as exc:
            raise ConfigError(f"{where}.matcher: {group.matcher!r} is not a regular expression ({exc})") from None
    commands = []
    for n, hook in enumerate(group.hooks):
        place = f"{where}.hooks[{n}]"
        if hook.type != "command":
            raise ConfigError(f"{place}.type: {hook.type!r} hooks are Claude Code's own; hookbus runs 'command' hooks")
        if hook.command is None:
            raise ConfigError(f"{place}: a command hook needs 'command'")
        argv = split_command(hook.command, project, f"{place}.command")
        commands.append(Command(hook.command, argv, min(hook.timeout, COMMAND_TIMEOUT_CAP_S)))
    return Group(group.matcher, pattern, tuple(commands))


def parse(data: bytes, project: Path, where: str) -> ClaudeHooks:
    """claude-hooks.json's bytes as ClaudeHooks; ConfigError names the file and the field."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not valid JSON ({exc})") from None
    config = convert(doc, ClaudeHooksFile, where, ConfigError)
    events: dict[str, tuple[Group, ...]] = {}
    unstaged = []
    for event, groups in config.hooks.items():
        if event in UNSTAGED:
            unstaged.append(event)
            continue
        if event not in STAGES:
            known = ", ".join(sorted({*STAGES, *UNSTAGED}))
            raise ConfigError(f"{where}: hooks.{event} is not a Claude Code hook event ({known})")
        events[event] = tuple(_group(g, project, f"{where}: hooks.{event}[{n}]") for n, g in enumerate(groups))
    return ClaudeHooks(events, tuple(unstaged))


def load(path: Path, project: Path) -> ClaudeHooks:
    """Read and check ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse(data, project, str(path))
