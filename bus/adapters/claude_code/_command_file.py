"""claude-hooks.json and Claude Code plugins: Claude Code's hooks configuration, read as hookbus handlers.

The file has Claude Code's own shape, so a team's existing hooks move over
unchanged: ``{"hooks": {event: [{"matcher": ..., "hooks": [{"type":
"command", "command": ..., "timeout": seconds}]}]}}``; a whole
``.claude/settings.json`` is one (its other keys are ignored), and so is a
plugin's ``hooks/hooks.json``. ``PreToolUse`` and ``PermissionRequest`` run on
``tool.call``, ``PostToolUse`` and ``PostToolUseFailure`` on ``tool.result``,
``UserPromptSubmit`` on ``user.message``. Claude Code's other events have no
stage: they are named in the log and not run; an event hookbus does not know
(a newer Claude Code's) is logged too, never a reason to refuse the file.

Each command is split without a shell. ``$CLAUDE_PROJECT_DIR`` (the
workspace), ``$HOME`` and, in a plugin, ``$CLAUDE_PLUGIN_ROOT`` (its folder)
are replaced; ``~`` and ``~/`` at the start of a word stand for the hooks'
HOME (the file's ``hookbus.home``, else the worker's). A hook type other than
``command``, a matcher RE2 refuses, a command the shell-hook rules refuse
(shell metacharacters, a NUL byte, another ``$`` variable) is an error naming
the file and the place.

Each command has a fail mode: a hook that cannot start, times out, or exits
with a code other than 0 or 2 refuses the call when it is fail-closed, and is
a logged non-blocking error when it is not. Its own ``onFailure``
(``block``/``continue``) decides, else the file's ``hookbus.onFailure``, else
the event: ``PreToolUse`` and ``PermissionRequest`` hooks are fail-closed.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson

from bus._core.declaration import DEFAULT_TIMEOUT_CEILING
from bus._core.errors import ConfigError
from bus._core.json_types import json_object
from bus._core.schema import convert
from bus._sandbox.security import command_problem
from bus.adapters._errors import PatternError
from bus.adapters.claude_code._config_schema import ClaudeHookCommand, ClaudeHooksFile, ClaudeMatcherGroup
from bus.adapters.claude_code._hook_rules import Matcher, claude_matcher

FILE: Final = "claude-hooks.json"
#: The stage each Claude Code event runs on.
STAGES: Final = {
    "PreToolUse": "tool.call",
    "PermissionRequest": "tool.call",
    "PostToolUse": "tool.result",
    "PostToolUseFailure": "tool.result",
    "UserPromptSubmit": "user.message",
}
#: Claude Code's hook events that have no hookbus stage (accepted, logged, not run).
UNSTAGED: Final = frozenset(
    {
        "Setup", "SessionStart", "SessionEnd", "InstructionsLoaded", "UserPromptExpansion", "PermissionDenied",
        "PostToolBatch", "Notification", "SubagentStart", "SubagentStop", "TaskCreated", "TaskCompleted", "Stop",
        "StopFailure", "TeammateIdle", "ConfigChange", "CwdChanged", "FileChanged", "WorktreeCreate",
        "WorktreeRemove", "PreCompact", "PostCompact", "Elicitation", "ElicitationResult",
    }
)  # fmt: skip
#: Events whose hooks are fail-closed unless they say otherwise: they gate a tool call.
FAIL_CLOSED_EVENTS: Final = frozenset({"PreToolUse", "PermissionRequest"})
#: The variable Claude Code gives its hooks for the project's directory; hookbus gives the workspace.
PROJECT_VARIABLE: Final = "CLAUDE_PROJECT_DIR"
#: The variable Claude Code gives a plugin's hooks for the plugin's folder.
PLUGIN_VARIABLE: Final = "CLAUDE_PLUGIN_ROOT"
#: Seconds the kernel waits beyond a handler's slowest command (the process start, the reply).
MARGIN_S: Final = 2.0
#: A command's timeout is cut to this: a kernel waits no longer for a handler unless its operator says so.
COMMAND_TIMEOUT_CAP: Final = DEFAULT_TIMEOUT_CEILING - MARGIN_S
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass(frozen=True)
class Command:
    """One command hook, split into its program and arguments (no shell), its timeout and its fail mode."""

    text: str
    argv: tuple[str, ...]
    timeout: float
    fail_closed: bool = False


@dataclass(frozen=True)
class Group:
    matcher: str
    pattern: Matcher
    commands: tuple[Command, ...]

    def wants(self, tool: str) -> bool:
        return self.pattern.wants(tool)


@dataclass(frozen=True)
class Places:
    """What the variables of a command stand for: the workspace, the hooks' HOME, a plugin's folder."""

    project: Path
    home: Path
    plugin_root: Path | None = None

    def variables(self) -> dict[str, str]:
        found = {PROJECT_VARIABLE: str(self.project), "HOME": str(self.home)}
        if self.plugin_root is not None:
            found[PLUGIN_VARIABLE] = str(self.plugin_root)
        return found


@dataclass(frozen=True)
class ClaudeHooks:
    """The groups of each Claude Code event hookbus runs, in file order, and where they run."""

    events: dict[str, tuple[Group, ...]]
    unstaged: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    places: Places | None = field(default=None, compare=False)

    def digest(self, event: str) -> str:
        """What the handler of ``event`` runs, as a digest: a changed command is a changed handler identity."""
        shape = [
            (g.matcher, [(c.argv, c.timeout, c.fail_closed) for c in g.commands]) for g in self.events.get(event, ())
        ]
        return hashlib.sha256(orjson.dumps(shape)).hexdigest()

    def fail_closed(self, event: str) -> bool:
        """Whether a command of ``event`` is fail-closed (then so is its handler)."""
        return any(c.fail_closed for g in self.events.get(event, ()) for c in g.commands)


def _tilde(arg: str, home: Path) -> str:
    if arg == "~":
        return str(home)
    if arg.startswith("~/"):
        return f"{home}/{arg[2:]}"
    return arg


def split_command(text: str, places: Places | Path, where: str) -> tuple[str, ...]:
    """``text`` as argv, its variables and leading ``~`` replaced; refused as the shell-hook rules say."""
    if isinstance(places, Path):
        places = Places(places, Path.home())
    problem = command_problem(text)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")
    variables: Mapping[str, str] = places.variables()
    for name in _VARIABLE.findall(text):
        if name not in variables:
            known = ", ".join(f"${n}" for n in variables)
            raise ConfigError(f"{where}: ${name}: only {known} are replaced (no shell runs the command)")
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: cannot split the command ({exc})") from None
    return tuple(_VARIABLE.sub(lambda m: variables[m.group(1)], _tilde(arg, places.home)) for arg in argv)


def _fail_closed(hook: ClaudeHookCommand, event: str, default: str | None) -> bool:
    mode = hook.on_failure or default
    return mode == "block" if mode is not None else event in FAIL_CLOSED_EVENTS


def _group(group: ClaudeMatcherGroup, event: str, places: Places, default: str | None, where: str) -> Group:
    try:
        pattern = claude_matcher(group.matcher)
    except PatternError as exc:
        raise ConfigError(f"{where}.matcher: {group.matcher!r} is not a regular expression ({exc})") from None
    commands = []
    for n, hook in enumerate(group.hooks):
        place = f"{where}.hooks[{n}]"
        if hook.type != "command":
            raise ConfigError(f"{place}.type: {hook.type!r} hooks are Claude Code's own; hookbus runs 'command' hooks")
        if hook.command is None:
            raise ConfigError(f"{place}: a command hook needs 'command'")
        argv = split_command(hook.command, places, f"{place}.command")
        timeout = min(hook.timeout, COMMAND_TIMEOUT_CAP)
        commands.append(Command(hook.command, argv, timeout, _fail_closed(hook, event, default)))
    return Group(group.matcher or "", pattern, tuple(commands))


def _home(value: str | None, project: Path) -> Path:
    if value is None:
        return Path.home()
    home = Path(value).expanduser()
    return home if home.is_absolute() else project / home


def parse(data: bytes, project: Path, where: str, plugin_root: Path | None = None) -> ClaudeHooks:
    """claude-hooks.json's (or a plugin's hooks.json's) bytes as ClaudeHooks; ConfigError names the file and field."""
    doc = json_object(data, where, ConfigError)
    misplaced = sorted(key for key in doc if key in STAGES or key in UNSTAGED) if "hooks" not in doc else []
    if misplaced:  # Claude Code refuses such a plugin ("expected record" at hooks): never serve it as no hooks
        raise ConfigError(f'{where}: {", ".join(misplaced)} must be under a top-level "hooks" object')
    known = {key: doc[key] for key in ("hooks", "hookbus") if key in doc}  # a settings.json's other keys: not ours
    config = convert(known, ClaudeHooksFile, where, ConfigError)
    places = Places(project, _home(config.hookbus.home, project), plugin_root)
    default = config.hookbus.on_failure
    events: dict[str, tuple[Group, ...]] = {}
    unstaged, unknown = [], []
    for event, groups in config.hooks.items():
        if event in UNSTAGED:
            unstaged.append(event)
            continue
        if event not in STAGES:
            unknown.append(event)
            continue
        place = f"{where}: hooks.{event}"
        events[event] = tuple(_group(g, event, places, default, f"{place}[{n}]") for n, g in enumerate(groups))
    return ClaudeHooks(events, tuple(unstaged), tuple(unknown), places)


def load(path: Path, project: Path, plugin_root: Path | None = None) -> ClaudeHooks:
    """Read and check ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse(data, project, str(path), plugin_root)
