"""The security rules of shell hooks: the one place that knows them.

As in the PRX document: a command with shell metacharacters, a NUL byte in
any command, argument, env key or env value, and a working directory that
escapes the workspace are refused, never run.

The hook's environment is built from nothing (nothing of the worker's own
environment is inherited): the fixed ``ZERO_HOOK_*`` variables, ``HOOKBUS_DEPTH``,
a safe ``PATH``, ``NATS_URL`` without credentials, and the action's ``env``.
An ``env`` name must be an upper-case variable name outside the families that a
dynamic loader, libc, an interpreter or a shell reads to load or run code
(``LD_*``, ``GCONV_PATH``, ``PYTHON*``, ``BASH_ENV`` ...): those are ignored.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

#: Characters refused in ``command`` (``$(`` is checked as a pair).
METACHARACTERS: Final = frozenset(";|&`<>\n\r")
#: The shape of a name an action's ``env`` may set.
ENV_NAME_RE: Final = re.compile(r"[A-Z_][A-Z0-9_]*")
#: Names an action's ``env`` may not set: hookbus's own, and what loaders, libc, shells read.
RESERVED_ENV: Final = frozenset(
    {
        "PATH", "HOME", "ENV", "IFS", "CDPATH", "PS4", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND",
        "GLOBIGNORE", "ZDOTDIR", "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS",
        "LOCALDOMAIN", "TZDIR", "TMPDIR", "TERMINFO", "TERMCAP", "GLIBC_TUNABLES", "CLASSPATH",
        "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "NODE_OPTIONS", "NODE_PATH",
        "RUBYOPT", "RUBYLIB", "PERLLIB", "PERL5LIB", "PERL5OPT", "LUA_PATH", "LUA_CPATH", "TCLLIBPATH",
        "GEM_PATH", "GEM_HOME", "OPENSSL_CONF", "OPENSSL_ENGINES", "SSL_CERT_FILE", "SSL_CERT_DIR",
        "CURL_HOME", "WGETRC", "EDITOR", "VISUAL", "PAGER", "BROWSER", "SUDO_ASKPASS", "SSH_ASKPASS",
    }
)  # fmt: skip
#: Name prefixes an action's ``env`` may not set (same reasons, whole families).
RESERVED_ENV_PREFIXES: Final = (
    "LD_", "DYLD_", "MALLOC_", "PYTHON", "PERL", "RUBY", "BASH_", "ZERO_HOOK_", "HOOKBUS_", "GIT_",
    "SSH_", "LC_", "XDG_", "GTK_", "QT_", "DBUS_", "KRB5", "NSS_", "NIX_",
)  # fmt: skip
#: Reserved names an action's ``env`` may still set: files that let ``hookbus emit`` in a hook authenticate.
ALLOWED_RESERVED_ENV: Final = frozenset(
    {"HOOKBUS_NATS_CREDS", "HOOKBUS_NATS_TLS_CA", "HOOKBUS_NATS_TLS_CERT", "HOOKBUS_NATS_TLS_KEY"}
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


def is_allowed_env(key: str) -> bool:
    """Whether an action's ``env`` may set ``key`` (see the module docstring)."""
    if key in ALLOWED_RESERVED_ENV:
        return True
    return bool(ENV_NAME_RE.fullmatch(key)) and key not in RESERVED_ENV and not key.startswith(RESERVED_ENV_PREFIXES)


def public_url(servers: str) -> str:
    """NATS URLs (comma-separated) without the ``user:password@`` part, for a hook to see."""
    return ",".join(_without_credentials(url.strip()) for url in servers.split(",") if url.strip())


def _without_credentials(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


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
