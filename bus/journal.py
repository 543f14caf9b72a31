"""Journal entries of middleware reactions: hookbus events on ``hookbus.journal.middleware``.

One event per reaction, in chain order, so that a handler that was absent,
failed, timed out, was denied by trust, or cancelled can be told apart later.
The envelope carries the timestamp, session and depth; the payload is built
here.
"""

from __future__ import annotations

from typing import Any

from bus.decisions import Decision


def entry(
    *,
    request_id: str,
    stage: str,
    phase: str,
    handler: str,
    outcome: str,
    decision: Decision | str,
    duration_ms: float,
    cause: str | None,
    agent: str | None,
    reason: str | None = None,
) -> dict[str, Any]:
    """The payload of one journal entry."""
    kind = decision if isinstance(decision, str) else decision.kind
    body: dict[str, Any] = {
        "id": request_id,
        "stage": stage,
        "phase": phase,
        "handler": handler,
        "outcome": outcome,
        "decision": kind,
        "duration_ms": round(duration_ms, 3),
        "cause": cause,
        "agent": agent,
    }
    reason = reason if reason is not None else getattr(decision, "reason", None)
    if reason is not None:
        body["reason"] = reason
    return body
