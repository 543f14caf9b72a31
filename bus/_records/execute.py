"""Running one compiled record on one call: its timeout, its fail mode, a checked decision.

Shared by the runner and ``hookbus records test``, so a record behaves the
same on the bus and on an operator's desk.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from bus._core.decisions import HandlerDecision
from bus._core.declaration import Declaration
from bus._middleware.faults import Outcome, fault_decision
from bus._middleware.handler.module import _check
from bus._records.sandbox import RecordCtx, RecordHandler
from bus._runtime.eager import HandlerTimedOut, fault_cause, run_bounded

log = logging.getLogger("hookbus.records")


@dataclass(frozen=True, slots=True)
class RecordRun:
    """How one call of a record ended: the decision (its fail mode applied to a fault) and why."""

    outcome: Outcome
    decision: HandlerDecision
    cause: str | None
    duration_ms: float


async def run_record(handler: RecordHandler, decl: Declaration, payload: dict[str, Any], ctx: RecordCtx) -> RecordRun:
    """Call the record with its declared timeout (a record that never awaits cannot be interrupted)."""
    started = time.perf_counter()
    try:
        # In a task of its own, started inline (bus._runtime.eager), as a Module's handler is.
        result = await run_bounded(handler(decl.stage, payload, ctx), decl.timeout)
        outcome, cause = _check(result)
    except HandlerTimedOut:
        outcome, cause, result = Outcome.TIMEOUT, f"no answer within {decl.timeout:g}s", None
    except Exception as exc:  # raised inline or in its task
        log.warning("record %s raised on %s", decl.qualname, decl.stage, exc_info=True)
        outcome, cause, result = Outcome.FAILED, fault_cause(exc), None
    elapsed = (time.perf_counter() - started) * 1000
    if outcome is not Outcome.OK:
        return RecordRun(outcome, fault_decision(decl.fail_closed, decl.qualname, outcome, cause or ""), cause, elapsed)
    assert isinstance(result, HandlerDecision)
    return RecordRun(outcome, result, None, elapsed)
