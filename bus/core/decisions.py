"""The three decisions of a middleware handler and their wire form.

``Continue()`` lets the action pass as is, ``Cancel(reason)`` forbids it,
``Patch(payload)`` lets it pass with a replaced payload. On the wire they are
``{"decision": "continue"}``, ``{"decision": "cancel", "reason": str}`` and
``{"decision": "patch", "payload": {...}}``; :func:`from_wire` is the one
parser of that form and names what is wrong with anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, TypeAlias

from bus.core.errors import DecisionError
from bus.core.payloads import to_dict


@dataclass(frozen=True, slots=True)
class Continue:
    """Let the action pass unchanged."""

    kind: ClassVar[str] = "continue"

    def to_wire(self) -> dict[str, Any]:
        return {"decision": "continue"}


@dataclass(frozen=True, slots=True)
class Cancel:
    """Forbid the action; the model and the journal see ``reason``.

    ``handler`` names who cancelled (``module.handler``) when the kernel
    returns it; ``payload`` is set on tool.result, where the output the model
    sees is replaced by a note carrying the reason.
    """

    kind: ClassVar[str] = "cancel"
    reason: str
    handler: str | None = None
    payload: dict[str, Any] | None = field(default=None, compare=False)

    def to_wire(self) -> dict[str, Any]:
        return {"decision": "cancel", "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Patch:
    """Let the action pass with ``payload`` instead of the original.

    ``payload`` may be a dict or a typed payload (see :mod:`bus.core.payloads`).
    """

    kind: ClassVar[str] = "patch"
    payload: Any

    def to_wire(self) -> dict[str, Any]:
        return {"decision": "patch", "payload": to_dict(self.payload)}


#: What a handler returns and what ``Bus.intercept`` gives back.
Decision: TypeAlias = Continue | Cancel | Patch

CONTINUE: Final = Continue()


def from_wire(obj: object, where: str) -> Decision:
    """Parse a decision object received from ``where``; raise DecisionError if it is not one."""
    if not isinstance(obj, dict):
        raise DecisionError(where, f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("decision")
    if kind == "continue":
        return CONTINUE
    if kind == "cancel":
        reason = obj.get("reason")
        if not isinstance(reason, str):
            raise DecisionError(where, "cancel without a string 'reason'")
        handler = obj.get("handler")
        return Cancel(reason, handler if isinstance(handler, str) else None)
    if kind == "patch":
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            raise DecisionError(where, "patch without an object 'payload'")
        return Patch(payload)
    raise DecisionError(where, f"unknown decision {kind!r}")
