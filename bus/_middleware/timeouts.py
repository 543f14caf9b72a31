"""How long kernels wait for handlers, as the operator and the agent set it (docs/middleware.md, Timeouts).

The operator's ceiling is ``<workspace>/middleware.yaml``:

    timeouts:
      ceiling_secs: 300    # no kernel of this workspace waits longer for one handler (default 30)

An agent's own bound is its agent.yaml's ``timeouts.hook_secs`` (agent_os's
key), at most the ceiling. A handler's declared timeout (default 2 s) is what
it gets, within both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

import msgspec

from bus._core.declaration import DEFAULT_TIMEOUT_CEILING, MAX_TIMEOUT
from bus._core.errors import ConfigError
from bus._core.schema import convert
from bus._runtime.config_files import read_yaml

MIDDLEWARE_FILE: Final = "middleware.yaml"
#: Seconds a bound may be: above 0, at most the protocol's bound on a declared timeout.
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT)]


class CeilingTimeouts(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """middleware.yaml ``timeouts``."""

    ceiling_secs: Seconds = DEFAULT_TIMEOUT_CEILING


class MiddlewareFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """``<workspace>/middleware.yaml``: the operator's settings of every kernel in the workspace."""

    timeouts: CeilingTimeouts = CeilingTimeouts()


def ceiling(workspace: Path) -> float:
    """The operator's ceiling from ``workspace``'s middleware.yaml (the default without one)."""
    path = workspace / MIDDLEWARE_FILE
    doc = read_yaml(path, missing_ok=True)
    if doc is None:
        return DEFAULT_TIMEOUT_CEILING
    return convert(doc, MiddlewareFile, str(path), ConfigError).timeouts.ceiling_secs
