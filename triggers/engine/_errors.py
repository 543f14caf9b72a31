"""Errors of the trigger engine's status.

The tree (under :class:`bus._core.errors.HookbusError`)::

    HookbusError
    └── TriggerStatusError   a reply on the trigger status subject is not a valid status
"""

from __future__ import annotations

from bus._core.errors import HookbusError


class TriggerStatusError(HookbusError):
    """A reply on the trigger status subject is not a valid status."""
