"""Errors of the fleet metrics receiver.

The tree (under :class:`bus._core.errors.HookbusError`)::

    HookbusError
    └── CountersReportError   bytes on a counters subject are not a valid counters report
"""

from __future__ import annotations

from bus._core.errors import HookbusError


class CountersReportError(HookbusError):
    """Bytes on a counters subject are not a valid counters report (docs/metrics.md)."""
