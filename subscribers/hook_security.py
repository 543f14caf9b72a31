"""The security rules of shell hooks: the one place that knows them.

As in the PRX document: a command with shell metacharacters, a NUL byte in
any command, argument, env key or env value, and a working directory that
escapes the workspace are refused, never run. Library-injection variables,
``PATH`` and ``HOME`` are removed from the hook's environment and cannot be
set through the action's ``env``; the hook gets a minimal safe ``PATH``.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

#: Characters refused in ``command`` (``$(`` is checked as a pair).
METACHARACTERS: Final = frozenset(";|&`<>\n\r")
#: Variables removed from the hook's environment and ignored in ``env``.
BLOCKED_ENV: Final = frozenset(
    {"LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH", "PATH", "HOME"}
)
#: The system part of the hook's PATH.
SYSTEM_PATH: Final = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def safe_path() -> str:
    """The hook's PATH: this interpreter's scripts directory, then the system directories.

    The scripts directory comes first so that ``hookbus emit`` inside a hook is
    the same hookbus as the worker's.
    """
    scripts = sysconfig.get_path("scripts")
    parts = [scripts, *(d for d in SYSTEM_PATH if d != scripts)]
    return os.pathsep.join(parts)


def is_blocked_env(key: str) -> bool:
    """Whether ``key`` may never be set in a hook's environment."""
    return key in BLOCKED_ENV or key.startswith("DYLD_")


def command_problem(command: str) -> str | None:
    """Why ``command`` is refused, or None."""
    if "\0" in command:
        return "command contains a NUL byte"
    found = sorted(METACHARACTERS.intersection(command))
    if "$(" in command:
        found.append("$(")
    if found:
        return f"command contains shell metacharacters {' '.join(repr(c) for c in found)}; put shell logic in a script"
    if not command.strip():
        return "command is empty"
    return None


def nul_problem(args: Iterable[str], env: Mapping[str, str]) -> str | None:
    """Why args or env are refused because of a NUL byte, or None."""
    for index, arg in enumerate(args):
        if "\0" in arg:
            return f"args[{index}] contains a NUL byte"
    for key, value in env.items():
        if "\0" in key:
            return f"env key {key!r} contains a NUL byte"
        if "\0" in value:
            return f"env[{key!r}] contains a NUL byte"
        if "=" in key or not key:
            return f"env key {key!r} is not a variable name"
    return None


def cwd_problem(cwd: str | None) -> str | None:
    """Why ``cwd`` is refused on sight (a ``..`` component or a NUL byte), or None."""
    if cwd is None:
        return None
    if "\0" in cwd:
        return "cwd contains a NUL byte"
    if ".." in Path(cwd).parts:
        return f"cwd {cwd!r} contains '..' (it may not climb out of the workspace)"
    return None


def resolve_cwd(cwd: str | None, workspace: Path) -> tuple[Path | None, str | None]:
    """The directory a hook runs in, or why it is refused.

    Relative directories are resolved against the workspace and, symlinks
    followed, must stay inside it. An absolute directory is taken as the
    operator wrote it (it was never inside the workspace to escape from).
    Checked at each run, since symlinks can change.
    """
    static = cwd_problem(cwd)
    if static is not None:
        return None, static
    root = workspace.resolve()
    if cwd is None:
        return root, None
    path = Path(cwd)
    if path.is_absolute():
        return path, None
    real = (root / path).resolve()
    if real != root and root not in real.parents:
        return None, f"cwd {cwd!r} escapes the workspace through a symlink (resolves to {real})"
    return real, None


def resolve_command(command: str, workspace: Path) -> str:
    """The path to execute: relative paths (with a slash) against the workspace, bare names on PATH."""
    if os.sep in command and not os.path.isabs(command):
        return str(workspace.resolve() / command)
    return command
