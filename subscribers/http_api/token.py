"""The bearer token of the hooks HTTP API.

``$HOOKBUS_API_TOKEN`` if set; else ``<workspace>/api-token``, created on first
start with a random token and mode 0600.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
from pathlib import Path
from typing import Final

from bus.core.errors import ConfigError

log = logging.getLogger("hookbus.api")

TOKEN_ENV: Final = "HOOKBUS_API_TOKEN"
TOKEN_FILE: Final = "api-token"


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
