"""The decisions of a middleware handler and their wire form.

``Continue()`` lets the action pass as is, ``Cancel(reason)`` forbids it,
``Patch(payload)`` lets it pass with a replaced payload; a handler may also
return ``Ask(reason)``: the kernel holds the call until an operator answers it
(or its deadline applies ``on_timeout``), and returns the answer as one of the
other three (docs/middleware.md, Asks). On the wire a decision
is the top of a module's reply, ``bus._core.middleware_schema.MiddlewareReply``
(``{"decision": "continue"}``, ``{"decision": "cancel", "reason": str}``,
``{"decision": "patch", "payload": {...}}``, ``{"decision": "ask", "reason": str,
"timeout": s}``): :func:`reply_of` writes one,
:func:`read_reply` is the one reader, and names what is wrong with anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, TypeAlias

import msgspec

from bus._core.errors import DecisionError
from bus._core.middleware_schema import MiddlewareReply, ReactionMsg
from bus._core.payloads import to_dict
from bus._core.schema import convert, decode


@dataclass(frozen=True, slots=True)
class Continue:
    """Let the action pass unchanged; ``outputs``: bag values the handler writes (its declared keys only)."""

    kind: ClassVar[str] = "continue"
    outputs: Mapping[str, Any] | None = field(default=None, compare=False)

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

    ``payload`` may be a dict or a typed payload (see :mod:`bus._core.payloads`); ``outputs``: bag
    values the handler writes (its declared keys only), as a :class:`Continue`'s.
    """

    kind: ClassVar[str] = "patch"
    payload: Any
    outputs: Mapping[str, Any] | None = field(default=None, compare=False)

    def to_wire(self) -> dict[str, Any]:
        return _builtins(reply_of(self))


#: Seconds an Ask waits for an operator unless it says otherwise, and the longest it may wait.
ASK_TIMEOUT: Final = 300.0
ASK_TIMEOUT_MAX: Final = 86400.0


@dataclass(frozen=True, slots=True)
class Ask:
    """Hold the action until an operator answers (allow, deny, edit) or ``timeout`` seconds pass.

    ``on_timeout`` (``"continue"`` or ``"cancel"``) is what the deadline
    applies; None: the asking handler's fail mode (fail-closed cancels).
    ``handler`` names who asked (``module.handler``) when the kernel reads it;
    ``payload`` is set when handlers before it in the same run patched: what it asks about.
    """

    kind: ClassVar[str] = "ask"
    reason: str
    timeout: float = ASK_TIMEOUT
    on_timeout: str | None = None
    handler: str | None = None
    payload: dict[str, Any] | None = field(default=None, compare=False)

    def to_wire(self) -> dict[str, Any]:
        return _builtins(reply_of(self))


#: What ``Bus.intercept`` gives back (an Ask is held and read as one of these).
Decision: TypeAlias = Continue | Cancel | Patch
#: What a handler may return: a decision, or an Ask.
HandlerDecision: TypeAlias = Continue | Cancel | Patch | Ask

CONTINUE: Final = Continue()


def reply_of(decision: HandlerDecision, reactions: list[ReactionMsg] | None = None) -> MiddlewareReply:
    """The reply a module sends for the decision of its run (a cancel names its handler, if it has one)."""
    more: Any = msgspec.UNSET if reactions is None else reactions
    if isinstance(decision, Patch):
        return MiddlewareReply(decision="patch", payload=to_dict(decision.payload), reactions=more)
    if isinstance(decision, Cancel):
        if decision.handler is None:
            return MiddlewareReply(decision="cancel", reason=decision.reason, reactions=more)
        return MiddlewareReply(decision="cancel", reason=decision.reason, handler=decision.handler, reactions=more)
    if isinstance(decision, Ask):
        reply = MiddlewareReply(decision="ask", reason=decision.reason, timeout=decision.timeout, reactions=more)
        if decision.on_timeout is not None:
            reply.on_timeout = decision.on_timeout  # type: ignore[assignment]  # checked by ask_problem
        if decision.handler is not None:
            reply.handler = decision.handler
        if decision.payload is not None:
            reply.payload = decision.payload
        return reply
    return MiddlewareReply(decision="continue", reactions=more)


def ask_problem(ask: Ask) -> str | None:
    """What makes an Ask unusable (a handler's bad return reads as invalid), or None."""
    if not isinstance(ask.reason, str):
        return "ask reason is not a string"
    timeout = ask.timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= ASK_TIMEOUT_MAX:
        return f"ask timeout must be a number of seconds in (0, {ASK_TIMEOUT_MAX:g}]"
    if ask.on_timeout not in (None, "continue", "cancel"):
        return "ask on_timeout must be 'continue', 'cancel' or None"
    return None


def read_reply(data: bytes, where: str) -> tuple[MiddlewareReply, HandlerDecision]:
    """A module's reply received from ``where`` and its decision; DecisionError naming what is wrong."""
    try:
        reply = decode(data, MiddlewareReply, "reply", ValueError)
    except ValueError as exc:
        raise DecisionError(where, str(exc)) from None
    return reply, decision_of(reply, where)


def from_wire(obj: object, where: str) -> HandlerDecision:
    """A reply already parsed from JSON, as a decision; DecisionError naming what is wrong."""
    try:
        reply = convert(obj, MiddlewareReply, "reply", ValueError)
    except ValueError as exc:
        raise DecisionError(where, str(exc)) from None
    return decision_of(reply, where)


def decision_of(reply: MiddlewareReply, where: str) -> HandlerDecision:
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
    if kind == "ask":
        if reply.reason is msgspec.UNSET:
            raise DecisionError(where, "ask without a string 'reason'")
        timeout = ASK_TIMEOUT if reply.timeout is msgspec.UNSET else reply.timeout
        on_timeout = None if reply.on_timeout is msgspec.UNSET else reply.on_timeout
        handler = None if reply.handler is msgspec.UNSET else reply.handler
        payload = None if reply.payload is msgspec.UNSET else reply.payload
        return Ask(reply.reason, timeout, on_timeout, handler, payload)
    raise DecisionError(where, "field 'decision' is required")


def _builtins(reply: MiddlewareReply) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(reply)
    return out
