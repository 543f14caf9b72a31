"""The fail-mode rule: the one place that turns a handler's fault into a decision.

Silence, no responders, a timeout, a crash or a reply that is not a decision
read as continue (fail-open), unless the handler declared ``fail_closed`` on
that stage: then they read as a cancel with the cause as reason. The kernel
applies it with the declaration it approved, whatever a module reports.
"""

from __future__ import annotations

import enum

from bus._core.decisions import CONTINUE, Cancel, Decision


class Outcome(enum.StrEnum):
    """How a handler's turn ended, as the journal records it."""

    OK = "ok"  # it answered with a valid decision
    ABSENT = "absent"  # nobody answered: no responders, or the module is gone (a guard's record holds the stage)
    TIMEOUT = "timeout"  # it did not answer within its timeout
    FAILED = "failed"  # it raised
    INVALID = "invalid"  # its answer was not a decision
    UNTRUSTED = "untrusted"  # not approved: not called (denied by trust)
    SHUTDOWN = "shutdown"  # the kernel was closing and stopped waiting
    OVERSIZE = "oversize"  # the request or reply is over the server's max_payload: it could not be sent
    BROKEN = "broken"  # the stage's chain is disabled (cycle or dangling reference): nothing called
    CHANGED = "changed"  # a guard's new version waits for approval and no approved instance is alive
    SKIPPED = "skipped"  # a required bag input was missing: not called (reads per its fail mode)


#: How a module may report a handler's turn; anything else is read as ``invalid`` by the kernel.
REPORTED: frozenset[str] = frozenset(
    {Outcome.OK, Outcome.ABSENT, Outcome.TIMEOUT, Outcome.FAILED, Outcome.INVALID, Outcome.OVERSIZE}
)


def fault_decision(fail_closed: bool, qualname: str, outcome: Outcome, cause: str) -> Decision:
    """The decision a fault reads as for a handler with this fail mode."""
    if fail_closed:
        return Cancel(f"{qualname} is fail-closed and {outcome.value}: {cause}", qualname)
    return CONTINUE
