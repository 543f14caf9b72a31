"""Errors of turns: a turn request that is not one, and a turn that could not finish.

The tree (under :class:`bus._core.errors.HookbusError`)::

    HookbusError
    ├── TurnRequestError   bytes on a turn subject are not a valid turn request
    └── TurnFailed         a turn could not finish (what eva.turn.failed reports)
"""

from __future__ import annotations

from bus._core.errors import HookbusError


class TurnRequestError(HookbusError):
    """Bytes on a turn subject are not a valid turn request."""


class TurnFailed(HookbusError):
    """A turn could not finish; the reason is what eva.turn.failed reports."""
