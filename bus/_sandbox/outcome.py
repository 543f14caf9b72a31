"""How a run of code on a user's behalf ended: a shell hook, a plugin call, a command hook.

The journal records these as the run's ``decision``; the metrics count them.
"""

from __future__ import annotations

import enum


class HookOutcome(enum.Enum):
    """How a hook run ended."""

    OK = "ok"
    FAILED = "failed"  # non-zero exit, killed by a signal, or could not start
    TIMEOUT = "timeout"
    REFUSED = "refused"  # security rules: never started
