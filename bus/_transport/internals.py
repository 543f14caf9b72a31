"""The nats-py internals hookbus uses, the versions they were checked against, and the switch.

Three things reach into nats-py's private state: the publish fast path
(:class:`bus._transport.publisher.Publisher` writes ``PUB`` commands into the
client's pending buffer and wakes its flusher), :func:`bus._transport.publisher.ordered_flush`
(hands the pending buffer to the transport before its ``PING``) and direct
subscriptions (:mod:`bus._transport.direct` stands in for a subscription's
pending queue). All are used only when the installed nats-py is inside the
tested range and the switch is on; otherwise they fall back to nats-py's
public ``publish``, ``flush`` (slower, and twice to keep the ordering
promise) and callback subscriptions.

The switch: ``HOOKBUS_NATS_INTERNALS=off`` in the environment, or
:func:`use_internals` in code.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import Final

#: nats-py versions (major, minor) the internals were checked against: from MIN inclusive to MAX exclusive.
TESTED_MIN: Final = (2, 16)
TESTED_MAX: Final = (2, 17)
#: Set to "off" (or "0", "false", "no") to use only nats-py's public API.
SWITCH_ENV: Final = "HOOKBUS_NATS_INTERNALS"

_override: list[bool | None] = [None]


def within_tested_range(installed: str) -> bool:
    """Whether a nats-py version string (``2.16.0``) is inside the tested range."""
    parts = installed.split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return False
    return TESTED_MIN <= major_minor < TESTED_MAX


def _installed() -> str:
    try:
        return version("nats-py")
    except PackageNotFoundError:
        return ""


_IN_RANGE: Final = within_tested_range(_installed())


def use_internals(enabled: bool | None) -> None:
    """Force the internals on (still only within the tested range) or off; None: back to the environment."""
    _override[0] = enabled


def internals_enabled() -> bool:
    """Whether the fast path and the ordered flush may use nats-py's internals now."""
    wanted = _override[0]
    if wanted is None:
        wanted = os.environ.get(SWITCH_ENV, "on").strip().lower() not in ("off", "0", "false", "no")
    return wanted and _IN_RANGE
