"""The workspace of every command, resolved one way: ``--workspace``, ``$HOOKBUS_WORKSPACE``, ``./.hookbus``.

Commands that read the workspace (journal, hooks test, triggers) refuse one
that does not exist, naming where the choice came from, rather than answer
with silence; ``hookbus up`` and the sinks create it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bus._core.errors import ConfigError

WORKSPACE_ENV: Final = "HOOKBUS_WORKSPACE"
DEFAULT_WORKSPACE: Final = Path(".hookbus")


@dataclass(frozen=True, slots=True)
class Workspace:
    """A resolved workspace directory and where the choice came from (for messages)."""

    path: Path
    source: str

    def __str__(self) -> str:
        return f"{self.path} ({self.source})"


def add_workspace(parser: argparse.ArgumentParser, what: str = "workspace") -> None:
    """Add ``--workspace DIR``; ``what`` says what the command keeps or reads there."""
    parser.add_argument(
        "--workspace",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"{what} (default: ${WORKSPACE_ENV}, else ./.hookbus)",
    )


def resolve(args: argparse.Namespace) -> Workspace:
    """The workspace the flags and environment name, whether or not it exists."""
    given: Path | None = getattr(args, "workspace", None)
    if given is not None:
        return Workspace(given.resolve(), "from --workspace")
    from_env = os.environ.get(WORKSPACE_ENV)
    if from_env:
        return Workspace(Path(from_env).resolve(), f"from ${WORKSPACE_ENV}")
    return Workspace(DEFAULT_WORKSPACE.resolve(), "the default ./.hookbus")


def existing(args: argparse.Namespace) -> Workspace:
    """The resolved workspace; ConfigError naming it and its source when it is not a directory."""
    workspace = resolve(args)
    if not workspace.path.is_dir():
        problem = "is not a directory" if workspace.path.exists() else "does not exist"
        raise ConfigError(
            f"workspace {workspace.path} ({workspace.source}) {problem}: "
            "give --workspace DIR or set $HOOKBUS_WORKSPACE (hookbus up creates one)"
        )
    return workspace


def bus_name(servers: list[str]) -> str:
    """The bus a command asked, as printed: its URLs without credentials."""
    from bus._sandbox.security import public_url  # a light module: URL and path rules

    return public_url(",".join(servers)) or "?"
