"""The bearer token of the hooks HTTP API.

``$HOOKBUS_API_TOKEN`` if set; else ``<workspace>/api-token``, created on first
start with a random token and mode 0600.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import re
import secrets
from pathlib import Path
from typing import Final

from bus._core.errors import ConfigError

log = logging.getLogger("hookbus.api")

TOKEN_ENV: Final = "HOOKBUS_API_TOKEN"
TOKEN_FILE: Final = "api-token"
#: The workspace directory of the agent hooks' tokens, one file per agent name: a hook token is accepted on
#: the agent-hook routes only (``POST /hooks/claude-code``), the admin token never there.
HOOK_TOKENS_DIR: Final = "hook-tokens"
_AGENT_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def load_token(workspace: Path) -> tuple[str, str]:
    """The token and where it comes from (for the startup banner)."""
    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if from_env:
        return from_env, f"${TOKEN_ENV}"
    path = workspace / TOKEN_FILE
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
    if path.stat().st_mode & 0o077:
        log.warning("%s is readable by other users; chmod 600 it", path)
    token = path.read_text().strip()
    if not token:
        raise ConfigError(f"{path} is empty: delete it to have a new token generated")
    return token, str(path)


def token_matches(header: str | None, token: str) -> bool:
    """Whether an Authorization header carries ``token``, compared in constant time."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())


def hook_token(workspace: Path, agent: str) -> tuple[str, Path]:
    """The hook-only token of ``agent`` and its file, made (0600, in a 0700 directory) when missing."""
    if not _AGENT_NAME.match(agent):
        raise ConfigError(f"agent name {agent!r}: use letters, digits, '_' and '-' (at most 64)")
    directory = workspace / HOOK_TOKENS_DIR
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    path = directory / agent
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
    token = path.read_text().strip()
    if not token:
        raise ConfigError(f"{path} is empty: delete it to have a new token generated")
    return token, path


def hook_agent(directory: Path, header: str | None) -> str | None:
    """The agent whose hook token (a file of ``directory``) the Authorization header carries, or None."""
    if not header or not header.startswith("Bearer "):
        return None
    found = None
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if not _AGENT_NAME.match(entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                token = Path(entry.path).read_text().strip()
                if token and token_matches(header, token):
                    found = entry.name
    return found
