"""The three decisions of a middleware handler and their wire form.

``Continue()`` lets the action pass as is, ``Cancel(reason)`` forbids it,
``Patch(payload)`` lets it pass with a replaced payload. On the wire a decision
is the top of a module's reply, ``bus.core.middleware_schema.MiddlewareReply``
(``{"decision": "continue"}``, ``{"decision": "cancel", "reason": str}``,
``{"decision": "patch", "payload": {...}}``): :func:`reply_of` writes one,
:func:`read_reply` is the one reader, and names what is wrong with anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, TypeAlias

import msgspec

from bus.core.errors import DecisionError
from bus.core.middleware_schema import MiddlewareReply, ReactionMsg
from bus.core.payloads import to_dict
from bus.core.schema import convert, decode


@dataclass(frozen=True, slots=True)
class Continue:
    """Let the action pass unchanged."""

    kind: ClassVar[str] = "continue"

    def to_wire(self) -> dict[str, Any]:
        return _builtins(reply_of(self))


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
        return _builtins(reply_of(self))


@dataclass(frozen=True, slots=True)
class Patch:
    """Let the action pass with ``payload`` instead of the original.

    ``payload`` may be a dict or a typed payload (see :mod:`bus.core.payloads`).
    """

    kind: ClassVar[str] = "patch"
    payload: Any

    def to_wire(self) -> dict[str, Any]:
        return _builtins(reply_of(self))


#: What a handler returns and what ``Bus.intercept`` gives back.
Decision: TypeAlias = Continue | Cancel | Patch

CONTINUE: Final = Continue()


def reply_of(decision: Decision, reactions: list[ReactionMsg] | None = None) -> MiddlewareReply:
    """The reply a module sends for the decision of its run (a cancel names its handler, if it has one)."""
    more: Any = msgspec.UNSET if reactions is None else reactions
    if isinstance(decision, Patch):
        return MiddlewareReply(decision="patch", payload=to_dict(decision.payload), reactions=more)
    if isinstance(decision, Cancel):
        if decision.handler is None:
            return MiddlewareReply(decision="cancel", reason=decision.reason, reactions=more)
        return MiddlewareReply(decision="cancel", reason=decision.reason, handler=decision.handler, reactions=more)
    return MiddlewareReply(decision="continue", reactions=more)


def read_reply(data: bytes, where: str) -> tuple[MiddlewareReply, Decision]:
    """A module's reply received from ``where`` and its decision; DecisionError naming what is wrong."""
    try:
        reply = decode(data, MiddlewareReply, "reply", ValueError)
    except ValueError as exc:
        raise DecisionError(where, str(exc)) from None
    return reply, decision_of(reply, where)


def from_wire(obj: object, where: str) -> Decision:
    """A reply already parsed from JSON, as a decision; DecisionError naming what is wrong."""
    try:
        reply = convert(obj, MiddlewareReply, "reply", ValueError)
    except ValueError as exc:
        raise DecisionError(where, str(exc)) from None
    return decision_of(reply, where)


def decision_of(reply: MiddlewareReply, where: str) -> Decision:
    """The decision a well-typed reply carries; DecisionError if it is an error or misses its part."""
    if reply.error is not msgspec.UNSET:
        raise DecisionError(where, f"the module answered an error: {reply.error}")
    kind = reply.decision
    if kind == "continue":
        return CONTINUE
    if kind == "cancel":
        if reply.reason is msgspec.UNSET:
            raise DecisionError(where, "cancel without a string 'reason'")
        return Cancel(reply.reason, None if reply.handler is msgspec.UNSET else reply.handler)
    if kind == "patch":
        if reply.payload is msgspec.UNSET:
            raise DecisionError(where, "patch without an object 'payload'")
        return Patch(reply.payload)
    raise DecisionError(where, "field 'decision' is required")


def _builtins(reply: MiddlewareReply) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(reply)
    return out
