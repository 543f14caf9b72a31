"""hookbus's own wire messages declared as types, and the one way to decode them.

Each message is a ``msgspec.Struct`` with its constraints; :func:`decode` reads
bytes as one of them and turns every failure (not JSON, not an object, a field
of the wrong type or out of range) into the caller's hookbus error, naming the
message and the field. Unknown fields are ignored, so older and newer peers
interoperate. docs/protocol.md describes every type here (a test checks it).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

from bus.core.depth import DEFAULT_MAX_DEPTH

#: A NATS subject token (agent, module names).
Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+$")]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]

T = TypeVar("T")


#: A SHA-256 in lower-case hex.
Sha256Hex = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]


class PayloadRefMsg(msgspec.Struct, kw_only=True):
    """An envelope's ``payload_ref``: the whole payload is the object ``name`` of ``bucket`` (the claim check).

    Receivers re-check it before fetching (bucket ``hookbus_payloads``, size
    within their cap) and after (the object's bytes have this size and SHA-256).
    """

    bucket: str
    name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_=-]{1,128}$")]
    size: NonNegative  # bytes of the payload's JSON object
    sha256: Sha256Hex  # of those bytes


#: What a receiver completed, in an event's ``received_as``: a PRX envelope without ``id`` or
#: ``depth``, or a bare PRX payload object wrapped as the event of its subject.
ReceivedAs = Literal["prx-envelope", "prx-payload"]


class EnvelopeMsg(msgspec.Struct, kw_only=True):
    """An event on its subject (docs/events.md). Receivers decode it with the hand-written check in
    bus.core.envelope (faster on the delivery path); a test holds the two to the same verdicts.

    ``id`` and ``depth`` may be missing (PRX documents its envelope without them): the receiver
    assigns an id, takes depth 0 and sets ``received_as`` to ``prx-envelope``. On
    ``prx.lifecycle.<event>`` an object with neither ``event`` nor ``payload`` is not an envelope
    but a bare payload (what PRX's agent publishes): the receiver wraps it as that event (receipt
    time, ``session_id`` null, depth 0, an id of its own) with ``received_as`` ``prx-payload``.
    """

    event: str  # the subject's event name (checked against the subject by the receiver)
    timestamp: str
    session_id: str | None  # required, may be null
    payload: dict[str, Any]
    id: str | msgspec.UnsetType = msgspec.UNSET  # absent: assigned on receipt
    depth: NonNegative = 0  # and below the receiver's limit
    source: str | None = None
    truncated: Any = False  # only ``true`` means cut
    received_as: Any = None  # set by receivers only (ReceivedAs); what a sender puts here is ignored
    payload_ref: PayloadRefMsg | None = None  # set: ``payload`` is a preview, the whole is in the object store
    traceparent: Any = None  # the emitter's W3C trace context; only a valid one is kept (bus.core.tracing)


#: Depths the journal takes: far beyond any recursion limit, and well inside SQLite's integers.
JOURNAL_MAX_DEPTH = 2**31 - 1
#: A duration beyond this (about 31 years) is not a duration.
JOURNAL_MAX_DURATION_MS = 1e12
Text = Annotated[str, msgspec.Meta(min_length=1)]


class JournalEntryMsg(msgspec.Struct, kw_only=True):
    """On ``hookbus.journal.<kind>[.<origin>]``: one intervention or reaction (docs/journal.md).

    The schema checks types and ranges; the receiver then caps long texts and
    replaces NUL (bus.journal.entries), so an entry from anyone can be stored.
    """

    kind: Text
    point: Text
    phase: Text
    who: Text
    decision: Text
    cause: Text | None = None
    duration_ms: Annotated[float, msgspec.Meta(ge=0, le=JOURNAL_MAX_DURATION_MS)] | None = None
    session: Text | None = None
    agent: Text | None = None
    depth: Annotated[int, msgspec.Meta(ge=0, le=JOURNAL_MAX_DEPTH)] = 0
    trace_id: Text | None = None
    identity: Text | None = None
    process: Text
    time: Text
    id: Text
    stdout: str | None = None  # a shell hook run's last output, as text (the receiver keeps its tail)
    stderr: str | None = None


class TurnRequestMsg(msgspec.Struct, kw_only=True):
    """On ``hookbus.turn.<agent>``: start a turn on ``agent`` with ``prompt``."""

    agent: str
    prompt: str
    id: str
    depth: NonNegative = 0
    trigger: str | None = None
    event: dict[str, Any] | None = None
    session_id: str | None = None
    timestamp: str | None = None
    #: The vouched publisher of ``event`` (docs/protocol.md, Publisher identity); None: unvouched or no event.
    publisher: str | None = None


class TurnResultMsg(msgspec.Struct):
    """The reply to a turn request, when the turn ends (``bus.TurnResult``)."""

    id: str
    agent: str
    status: Literal["completed", "failed"]
    answer: str | None = None
    error: str | None = None


class TriggerRow(msgspec.Struct, kw_only=True):
    """One trigger in a status reply: what it listens to, and what it has done."""

    name: str
    on: str
    agent: str
    enabled: bool
    fired: NonNegative
    last_fired: str | None
    in_flight: NonNegative
    suppressed: dict[str, NonNegative]


class TriggerStatusMsg(msgspec.Struct, kw_only=True):
    """The reply on ``hookbus.triggers.status``: each trigger of the engine that answered."""

    triggers: list[TriggerRow]


class TrustRecord(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_trust`` bucket: the operator approved this identity of a handler."""

    identity: str
    declaration: dict[str, Any]
    approved_by: str
    how: str  # "approved" or "trust-new"
    at: float
    #: When this handler was first approved (kept across re-approvals): equal priorities run in this order.
    first_at: float | None = None


class TrustApproval(msgspec.Struct):
    """What a kernel reads of a trust value: only ``identity`` (docs/protocol.md, Trust)."""

    identity: str


class TrustOrder(msgspec.Struct):
    """What a kernel reads of a trust value to order a chain: when the handler was first approved.

    Records written before ``first_at`` existed give their ``at`` (the last approval) instead.
    """

    at: float | None = None
    first_at: float | None = None


class SwitchRecordMsg(msgspec.Struct, kw_only=True):
    """A ``switch.<module>.<handler>`` value of the trust bucket: the operator's switches of one handler.

    ``agents`` null: the handler applies to every agent (global); a list: only to those agents.
    """

    enabled: bool = True
    agents: list[Token] | None = None
    by: str = ""
    at: float = 0.0


class RejectRecordMsg(msgspec.Struct, kw_only=True):
    """A ``reject.<module>.<handler>`` value of the trust bucket: the versions of a handler the operator rejected.

    ``identities``: declaration identities, newest last (no field named ``identity``: never read as an approval).
    """

    identities: list[Sha256Hex] = []
    by: str = ""
    at: float = 0.0


class GuardRecordMsg(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_guards`` bucket: a fail-closed handler that stays in force."""

    identity: str
    declaration: dict[str, Any]  # its own rules: bus.core.declaration.from_wire
    at: float | None = None  # Unix time the module started serving (absent: unknown)
    stopped_at: float | None = None  # Unix time it stopped cleanly, if it did


class AnnouncementMsg(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_modules`` bucket: one serving process of a module announces itself."""

    protocol: int = 1
    module: str
    instance: str
    subject: str | msgspec.UnsetType = msgspec.UNSET  # if present, the module's own; never used otherwise
    heartbeat: Annotated[float, msgspec.Meta(ge=0.05, le=60)] = 1.0
    batch: Any = False  # only ``true`` means batches (anything else: one handler per request)
    handlers: list[dict[str, Any]]  # declarations: their own rules, bus.core.declaration.from_wire
    host: Any = None  # informational
    pid: Any = None  # informational
    at: float = 0.0


#: A short text of a presence record, as ``hookbus status`` shows it.
ShortText = Annotated[str, msgspec.Meta(max_length=200)]
#: What a process runs, as ``hookbus status`` groups it.
#: ``kernel``: a middleware kernel's own trust settings (a handler it manages, or ``*`` with ``trust-new``).
ComponentKind = Literal["bus", "agent", "worker", "trigger_engine", "journal_sink", "kernel"]


class PresenceComponent(msgspec.Struct, kw_only=True):
    """One part a process runs: its ``kind``, its ``name`` and a ``detail`` for people."""

    kind: ComponentKind
    name: ShortText
    detail: ShortText = ""


class PresenceMsg(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_presence`` bucket: one process says it is alive and what it runs."""

    user: Token  # the NATS user, also the key's first token (the permissions bind the two)
    instance: Token
    process: ShortText  # ``hookbus up``, ``hookbus worker`` ...
    version: ShortText  # the hookbus version it runs
    host: ShortText
    pid: Annotated[int, msgspec.Meta(ge=0)]
    heartbeat: Annotated[float, msgspec.Meta(gt=0, le=3600)]
    started: float
    at: float  # Unix time of this beat, by the process's clock
    components: Annotated[list[PresenceComponent], msgspec.Meta(max_length=32)]


#: The depths a middleware request may claim: below the recursion limit.
RequestDepth = Annotated[int, msgspec.Meta(ge=0, lt=DEFAULT_MAX_DEPTH)]
#: A duration a module may report for a handler (ms); beyond it the number means nothing.
ReportedMs = Annotated[float, msgspec.Meta(ge=0, lt=1e8)]
#: The three decisions, as the wire names them.
DecisionKind = Literal["continue", "cancel", "patch"]


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
    #: The caller's W3C trace context (bus.core.tracing), sent only when it traces; a malformed one is ignored.
    traceparent: str | msgspec.UnsetType = msgspec.UNSET
    #: The bag values the requested handlers read (docs/protocol.md, The bag), sent only when some handler reads any.
    inputs: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET


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
    handler: str | msgspec.UnsetType = msgspec.UNSET  # a cancel's: who cancelled (``module.handler``)
    payload: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET  # a patch's: the payload after the run
    reactions: list[ReactionMsg] | msgspec.UnsetType = msgspec.UNSET
    error: str | msgspec.UnsetType = msgspec.UNSET  # instead of a decision: the request could not be run


class MiddlewareCountsMsg(msgspec.Struct, kw_only=True):
    """One (handler, stage) of a counters report: reactions since the last report, and their latency."""

    handler: str
    stage: str
    calls: dict[str, NonNegative] = {}  # outcome (ok, timeout, failed, ...) -> reactions
    decisions: dict[str, NonNegative] = {}  # continue | cancel | patch -> reactions
    fail_closed: NonNegative = 0  # faults of a fail_closed handler that cancelled
    latency: list[NonNegative] = []  # reactions per latency bucket (bus.core.fleet.LATENCY_BUCKETS, then +Inf)
    latency_sum: Annotated[float, msgspec.Meta(ge=0)] = 0.0  # seconds


class CountersMsg(msgspec.Struct, kw_only=True):
    """On ``hookbus.counters[.<user>]``: what one process counted since its previous report (docs/metrics.md).

    Every count is a difference, never a total, so a lost report loses only
    its own counts; a receiver re-checks the ranges and caps the labels.
    """

    process: str  # host:pid, informational
    dropped: dict[str, NonNegative] = {}  # reason -> events
    truncated: NonNegative = 0
    delivered: dict[str, NonNegative] = {}  # subject -> events handed to a handler
    handler_errors: dict[str, NonNegative] = {}  # subscription pattern -> handlers that raised
    disconnects: NonNegative = 0
    reconnects: NonNegative = 0
    middleware: list[MiddlewareCountsMsg] = []


class AgentHookInput(msgspec.Struct, kw_only=True):
    """A Claude Code or Codex hook input, as their hook documentation describes it (docs/integrations.md).

    Only what hookbus maps is typed; other fields are ignored. Each field is
    checked when present (``tool_input`` an object, ``session_id`` a string ...).
    """

    hook_event_name: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    session_id: str | None = None
    cwd: str | None = None
    transcript_path: str | None = None
    permission_mode: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    tool_response: Any = None
    error: Any = None  # Claude Code's PostToolUseFailure, Codex's StopFailure: untyped, as the fields below
    prompt: str | None = None
    source: str | None = None
    reason: str | None = None
    trigger: str | None = None
    stop_hook_active: bool | None = None
    turn_id: str | None = None
    model: str | None = None
    # Codex's SubagentStart / StopFailure and Gemini CLI's model hooks; untyped so that an agent sending
    # another shape for a field hookbus only reports never makes the whole input unreadable.
    agent_id: Any = None
    agent_type: Any = None
    error_details: Any = None
    llm_request: Any = None
    llm_response: Any = None


AdapterFlavor = Literal["claude-code", "codex", "gemini"]


class AdapterRequestMsg(msgspec.Struct, kw_only=True):
    """A hook input relayed to ``hookbus up`` on ``hookbus.adapter.<flavor>.<user>``.

    Sent by ``hookbus claude-hook`` / ``codex-hook``.
    """

    input: dict[str, Any]
    depth: RequestDepth = 0


class AdapterReplyMsg(msgspec.Struct, kw_only=True):
    """What the agent's hook command does: exit with ``exit_code``, print ``output`` (JSON) and ``stderr``.

    ``fail_closed`` names, per stage, the trusted fail-closed handlers in force:
    the command remembers it for when the bus cannot be reached. ``error``
    instead of an answer: the input was refused (it names the field).
    """

    exit_code: Annotated[int, msgspec.Meta(ge=0, le=2)] = 0
    output: dict[str, Any] | None = None
    stderr: Annotated[str, msgspec.Meta(max_length=65536)] = ""
    fail_closed: dict[str, list[str]] = {}
    error: str | None = None


#: Every wire message declared here, for the documentation check.
#: The largest record source a store accepts (characters): a handler, not a program.
RECORD_MAX_SOURCE: Final = 64 * 1024


class HandlerRecordMsg(msgspec.Struct, kw_only=True):
    """A stored handler record (``hookbus_records``, docs/records.md): a declaration and its Python source.

    ``author``, ``at`` and ``note`` are informational and outside the record's identity.
    """

    name: Token
    stage: str
    source: Annotated[str, msgspec.Meta(max_length=RECORD_MAX_SOURCE)]
    match: list[str] = []
    when: dict[str, Any] = {}
    before: list[str] = []
    after: list[str] = []
    #: Bag ports (docs/middleware.md, The bag): what it reads (a key or ``{key, default, required}``) and writes.
    inputs: list[str | dict[str, Any]] = []
    outputs: list[str] = []
    fail_closed: bool = False
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    enabled: bool = True
    author: str | None = None
    at: float = 0.0
    note: str | None = None


class ApprovedRecordMsg(msgspec.Struct, kw_only=True):
    """The runner's copy of an approved record version (``hookbus_records_approved``), kept apart from the drafts."""

    record: HandlerRecordMsg
    identity: Sha256Hex  # the record's declaration identity when it was approved
    disabled: str | None = None  # why a runner disabled it (kept failing); cleared by a new approved version
    at: float = 0.0


MESSAGES: tuple[type[msgspec.Struct], ...] = (
    EnvelopeMsg,
    PayloadRefMsg,
    JournalEntryMsg,
    TurnRequestMsg,
    TurnResultMsg,
    TriggerStatusMsg,
    TriggerRow,
    TrustRecord,
    TrustApproval,
    GuardRecordMsg,
    AnnouncementMsg,
    PresenceMsg,
    PresenceComponent,
    MiddlewareRequest,
    RequestCtx,
    MiddlewareReply,
    ReactionMsg,
    AdapterRequestMsg,
    AdapterReplyMsg,
    HandlerRecordMsg,
    ApprovedRecordMsg,
)

_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
#: Any message above as JSON bytes (fields left unset are not written).
encode: Final = msgspec.json.Encoder().encode


def decode(
    data: bytes, kind: type[T], what: str, error: type[Exception], malformed: type[Exception] | None = None
) -> T:
    """``data`` as a ``kind``; raise ``error`` naming ``what`` and the field that is wrong.

    ``malformed``, if given, is raised instead when ``data`` is not a JSON object at all.
    """
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        result: T = decoder.decode(data)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if text.startswith("Expected `object`, got `") and " - at `" not in text:  # not an object at all
            raise (malformed or error)(f"{what} must be a JSON object, not {text.split('`')[3]}") from None
        raise error(f"{what}: {_field_message(text)}") from None
    except msgspec.DecodeError as exc:
        raise (malformed or error)(f"{what} is not JSON ({exc})") from None
    return result


def convert(obj: object, kind: type[T], where: str, error: type[Exception]) -> T:
    """A parsed document (YAML, JSON) as a ``kind``; raise ``error`` naming ``where`` and the field."""
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise error(f"{where}: {_field_message(str(exc))}") from None


_MISSING = re.compile(r"Object missing required field `([^`]*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")


def _message_and_path(text: str) -> tuple[str, str]:
    """msgspec's ``Expected `str`, got `int` - at `$.hooks[0].agent``` as its message and ``hooks[0].agent``."""
    message, _, where = text.partition(" - at `")
    if where.startswith("key` in `"):  # a mapping key of the wrong type
        message, where = f"a key: {message[:1].lower()}{message[1:]}", where[len("key` in `") :]
    return message, where.rstrip("`").removeprefix("$").lstrip(".")


def _field_message(text: str) -> str:
    """msgspec's ``Expected `str`, got `int` - at `$.agent``` as ``field 'agent': expected `str`, got `int```."""
    message, path = _message_and_path(text)
    prefix = f"{path}." if path else ""
    if missing := _MISSING.fullmatch(message):
        return f"field {prefix + missing.group(1)!r} is required"
    if unknown := _UNKNOWN.fullmatch(message):
        return f"unknown field {prefix + unknown.group(1)!r}"
    if not path:
        return message[:1].lower() + message[1:]
    return f"field {path!r}: {message[:1].lower()}{message[1:]}"


_TOP_FIELD = re.compile(r"[^.\[]+")


def field_problem(exc: msgspec.ValidationError) -> tuple[str | None, str]:
    """msgspec's complaint as (the top-level field it is about, or None; what is wrong), for errors
    that carry the field apart from the message (HookConfigError)."""
    message, path = _message_and_path(str(exc))
    if missing := _MISSING.fullmatch(message):
        return missing.group(1), "required field is missing"
    if unknown := _UNKNOWN.fullmatch(message):
        return unknown.group(1), "unknown field"
    name = _TOP_FIELD.match(path)
    detail = "" if name is None or name.group(0) == path else " (in a value)" if "[...]" in path else f" (at {path})"
    return (name.group(0) if name else None), message[:1].lower() + message[1:] + detail
