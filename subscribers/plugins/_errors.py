"""Errors of the WASM plugins.

The tree (under :mod:`bus._core.errors`)::

    ConfigError
    └── PluginError    a plugin's manifest or module is refused (names the plugin; also ValueError)
    HookbusError
    └── PluginTrap     a plugin's call did not return: trapped, out of time or memory
"""

from __future__ import annotations

from bus._core.errors import ConfigError, HookbusError


class PluginError(ConfigError, ValueError):
    """A WASM plugin cannot be loaded or run: its manifest, its module, or a grant is refused.

    ``plugin`` is the plugin's folder name.
    """

    def __init__(self, plugin: str, reason: str) -> None:
        self.plugin = plugin
        self.reason = reason
        super().__init__(f"plugin {plugin}: {reason}")


class PluginTrap(HookbusError):
    """A WASM plugin's call did not return: it trapped, was stopped at its time limit, or ran out of memory."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out
