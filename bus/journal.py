"""Journal entries of middleware reactions, published on ``hookbus.journal.middleware``.

One entry per reaction, in chain order, so that a handler that was absent,
failed, timed out, was denied by trust, or cancelled can be told apart later.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

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
    context: dict[str, Any],
    reason: str | None = None,
) -> bytes:
    """Encode one journal entry."""
    kind = decision if isinstance(decision, str) else decision.to_wire()["decision"]
    body: dict[str, Any] = {
        "id": request_id,
        "ts": time.time(),
        "stage": stage,
        "phase": phase,
        "handler": handler,
        "outcome": outcome,
        "decision": kind,
        "duration_ms": round(duration_ms, 3),
        "cause": cause,
        "session": context.get("session"),
        "agent": context.get("agent"),
        "depth": context.get("depth", 0),
    }
    reason = reason if reason is not None else getattr(decision, "reason", None)
    if reason is not None:
        body["reason"] = reason
    return orjson.dumps(body)
