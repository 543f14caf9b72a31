"""The middleware protocol's wire messages: a module's announcement, a request with its context, a reply."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from bus._core.depth import DEFAULT_MAX_DEPTH


class AnnouncementMsg(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_modules`` bucket: one serving process of a module announces itself."""

    protocol: int = 1
    module: str
    instance: str
    subject: str | msgspec.UnsetType = msgspec.UNSET  # if present, the module's own; never used otherwise
    heartbeat: Annotated[float, msgspec.Meta(ge=0.05, le=60)] = 1.0
    batch: Any = False  # only ``true`` means batches (anything else: one handler per request)
    handlers: list[dict[str, Any]]  # declarations: their own rules, bus._core.declaration.from_wire
    host: Any = None  # informational
    pid: Any = None  # informational
    #: Protocol 2: seconds between re-puts of an unchanged announcement (it does not beat); before ``at``,
    #: which stays the last field (a kernel takes a re-put that only moves it from the checked one).
    refresh: Annotated[float, msgspec.Meta(ge=1, le=86400)] | msgspec.UnsetType = msgspec.UNSET
    at: float = 0.0


#: The depths a middleware request may claim: below the recursion limit.
RequestDepth = Annotated[int, msgspec.Meta(ge=0, lt=DEFAULT_MAX_DEPTH)]
#: A duration a module may report for a handler (ms); beyond it the number means nothing.
ReportedMs = Annotated[float, msgspec.Meta(ge=0, lt=1e8)]
#: The three decisions, as the wire names them.
DecisionKind = Literal["continue", "cancel", "patch", "ask"]
#: An ask's wait in seconds: at most a day (bus._core.decisions.ASK_TIMEOUT_MAX).
AskSeconds = Annotated[float, msgspec.Meta(gt=0, le=86400)]
#: A run's depth in its agent's process tree (0: a run nobody spawned), as its agent claims it.
SpawnDepth = Annotated[int, msgspec.Meta(ge=0, le=1000)]
#: A process's tool allowlist as its agent claims it: at most this many names.
ToolNames = Annotated[list[str], msgspec.Meta(max_length=1024)]
#: A budget amount (USD or tokens, per ``budget_unit``) as the agent claims it.
BudgetAmount = Annotated[float, msgspec.Meta(ge=0, lt=1e15)]


class RequestCtx(msgspec.Struct, kw_only=True):
    """A middleware request's ``ctx``: whose call it is, at which depth, until when the kernel waits."""

    session: str | None = None
    agent: str | None = None
    depth: RequestDepth = 0
    id: str = ""  # the intercept's id, shared by its requests and journal entries
    deadline: float = 0.0  # Unix time
    #: Sent only when the caller gave them (docs/protocol.md, Context): whose message, which template, which process.
    user: str | msgspec.UnsetType = msgspec.UNSET
    template: str | msgspec.UnsetType = msgspec.UNSET
    process: str | msgspec.UnsetType = msgspec.UNSET
    #: The caller's W3C trace context (bus._core.traceparent), sent only when it traces; a malformed one is ignored.
    traceparent: str | msgspec.UnsetType = msgspec.UNSET
    #: The bag values the requested handlers read (docs/protocol.md, The bag), sent only when some handler reads any.
    inputs: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    #: The calling agent's claims about its run (docs/protocol.md, Context), each sent only when given: the
    #: parent run, the depth in the process tree (``depth`` above stays the event depth), the tool allowlist,
    #: and the budget of the layer closest to its limit (``budget_unit``: usd or tokens).
    parent: str | msgspec.UnsetType = msgspec.UNSET
    spawn_depth: SpawnDepth | msgspec.UnsetType = msgspec.UNSET
    tools: ToolNames | msgspec.UnsetType = msgspec.UNSET
    budget_total: BudgetAmount | msgspec.UnsetType = msgspec.UNSET
    budget_spent: BudgetAmount | msgspec.UnsetType = msgspec.UNSET
    budget_unit: str | msgspec.UnsetType = msgspec.UNSET


class MiddlewareRequest(msgspec.Struct, kw_only=True):
    """On ``hookbus.mw.<module>.<version>``: run these handlers of the module, in order, on a payload."""

    stage: str
    payload: dict[str, Any] = {}
    ctx: RequestCtx = msgspec.field(default_factory=RequestCtx)
    handlers: list[str] | None = None  # None: every handler of the stage, in declaration order


class ReactionMsg(msgspec.Struct, kw_only=True):
    """One handler's turn in a middleware reply: how it ended and what the module made of it.

    ``outcome`` and ``decision`` are any strings here: the kernel reads a value
    it does not know as ``invalid`` for that handler (docs/protocol.md, Who applies fail modes).
    """

    handler: str
    outcome: str
    decision: str | None = None
    reason: str | msgspec.UnsetType | None = msgspec.UNSET  # sent with a cancel only
    duration_ms: ReportedMs | None = None
    cause: str | None = None
    #: Bag values the handler wrote (only its declared outputs are kept by the kernel).
    outputs: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET


class MiddlewareReply(msgspec.Struct, kw_only=True):
    """A module's answer to a middleware request: the run's decision and each handler's reaction, or an error."""

    decision: DecisionKind | msgspec.UnsetType = msgspec.UNSET
    reason: str | msgspec.UnsetType = msgspec.UNSET  # a cancel's
    handler: str | msgspec.UnsetType = msgspec.UNSET  # a cancel's (or ask's): who cancelled (``module.handler``)
    timeout: AskSeconds | msgspec.UnsetType = msgspec.UNSET  # an ask's: how long it waits for an operator
    on_timeout: Literal["continue", "cancel"] | msgspec.UnsetType = msgspec.UNSET  # an ask's: what its deadline does
    payload: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET  # a patch's: the payload after the run
    reactions: list[ReactionMsg] | msgspec.UnsetType = msgspec.UNSET
    error: str | msgspec.UnsetType = msgspec.UNSET  # instead of a decision: the request could not be run
