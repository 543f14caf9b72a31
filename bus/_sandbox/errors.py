"""Errors of the sandbox hooks, plugins and ``hookbus isolate`` run in (under :mod:`bus._core.errors`)."""

from __future__ import annotations

from bus._core.errors import ConfigError


class IsolationUnavailable(ConfigError):
    """Isolation was asked for and this machine cannot provide it: the process is refused, never run bare."""
