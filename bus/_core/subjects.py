"""Subject and pattern rules: the one place that knows them.

Subjects are dot-separated tokens matching ``[A-Za-z0-9_-]+``. Events live on
``prx.lifecycle.<event>`` (the eight PRX events), ``eva.<name>`` (Eva events,
dotted names such as ``eva.turn.completed``) and ``eva.custom.<name>``; any
other valid subject is allowed too, the bus is open.

Subscription patterns use NATS wildcards (``*`` one token, ``>`` the rest) and
also accept the PRX-style forms, mapped by :func:`normalise_pattern`.
"""

from __future__ import annotations

import hashlib
import re

from bus._core.errors import MiddlewareError, SubjectError

TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+")


def is_qualname(name: str) -> bool:
    """Whether ``name`` names one handler, ``module.handler`` (two tokens, one dot)."""
    module, dot, handler = name.partition(".")
    return bool(dot) and TOKEN_RE.fullmatch(module) is not None and TOKEN_RE.fullmatch(handler) is not None


def handler_key(prefix: str, qualname: str) -> str:
    """``<prefix><module>.<handler>``, the bucket key of one handler's record (MiddlewareError if not a qualname)."""
    if not is_qualname(qualname):
        raise MiddlewareError(f"{qualname!r} is not module.handler")
    return prefix + qualname


def handler_of_key(prefix: str, key: str) -> str | None:
    """The ``module.handler`` a bucket key ``<prefix><module>.<handler>`` is of, or None if it is not one."""
    name = key[len(prefix) :] if key.startswith(prefix) else ""
    return name if is_qualname(name) else None


PRX_DOMAIN = "prx.lifecycle"
EVA_DOMAIN = "eva"

#: The eight PRX lifecycle events, in the order the PRX document lists them.
PRX_EVENTS = (
    "agent_start",
    "agent_end",
    "llm_request",
    "llm_response",
    "tool_call_start",
    "tool_call",
    "turn_complete",
    "error",
)
_PRX_EVENT_SET = frozenset(PRX_EVENTS)


def _tokens(text: object, what: str) -> list[str]:
    if not isinstance(text, str):
        raise SubjectError(text, f"a {what} must be a string, not {type(text).__name__}")
    if not text:
        raise SubjectError(text, f"empty {what}")
    tokens = text.split(".")
    if "" in tokens:
        raise SubjectError(text, "empty token (leading, trailing or doubled dot)")
    return tokens


def validate_subject(subject: object) -> str:
    """Return ``subject`` if events may be published to it, else raise SubjectError."""
    for token in _tokens(subject, "subject"):
        if token in ("*", ">"):
            raise SubjectError(subject, f"wildcard {token!r} is not allowed when publishing")
        if not TOKEN_RE.fullmatch(token):
            raise SubjectError(subject, f"token {token!r} has characters outside [A-Za-z0-9_-]")
    assert isinstance(subject, str)
    return subject


#: Whole subjects as publishers may use them (one C call; the receive path checks every message).
_SUBJECT_RE = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
#: Received subjects remembered as valid, with their event names (bounded; cleared when full).
_received: dict[str, str] = {}
_RECEIVED_CACHE_SIZE = 4096
#: Fast accessor for hot paths: the event name of a subject already found valid, else None.
known_event_name = _received.get


def received_event_name(subject: str) -> str | None:
    """The event name a valid received ``subject`` carries, or None if the subject breaks the rules.

    Receivers check subjects as if the sender were hostile: NATS itself lets
    ``ü``, ``$`` or ``*`` inside tokens through. Cached, since this runs per message.
    """
    name = _received.get(subject)
    if name is None:
        if not _SUBJECT_RE.fullmatch(subject):
            return None
        if len(_received) >= _RECEIVED_CACHE_SIZE:
            _received.clear()
        name = _received[subject] = event_name(subject)
    return name


def subject_problem(subject: str) -> str | None:
    """Why a received ``subject`` is refused (naming the bad token), or None."""
    if received_event_name(subject) is not None:
        return None
    try:
        validate_subject(subject)
    except SubjectError as exc:
        return exc.reason
    return "not a valid subject"  # pragma: no cover - the two checks agree


def validate_pattern(pattern: object) -> str:
    """Return a NATS subscription pattern if valid, else raise SubjectError."""
    tokens = _tokens(pattern, "pattern")
    last = len(tokens) - 1
    for index, token in enumerate(tokens):
        if token == ">" and index != last:
            raise SubjectError(pattern, "'>' may only be the last token")
        if token not in ("*", ">") and not TOKEN_RE.fullmatch(token):
            raise SubjectError(pattern, f"token {token!r} has characters outside [A-Za-z0-9_-]")
    assert isinstance(pattern, str)
    return pattern


def normalise_pattern(pattern: object) -> str:
    """Map a PRX-style or NATS pattern to the NATS pattern to subscribe to.

    - ``*`` or ``>`` alone: every event (``>``).
    - a bare PRX event name (``tool_call``): ``prx.lifecycle.tool_call``.
    - ``<domain>.*`` (two tokens, the PRX "hierarchical" form, e.g. ``prx.*``,
      ``eva.*``): everything under the domain (``<domain>.>``). No hookbus event
      has only two tokens, so the NATS reading would match nothing.
    - anything else: NATS semantics unchanged (``prx.lifecycle.*`` is one token).
    """
    if pattern == "*":
        return ">"
    if isinstance(pattern, str) and pattern in _PRX_EVENT_SET:
        return f"{PRX_DOMAIN}.{pattern}"
    tokens = validate_pattern(pattern).split(".")
    if len(tokens) == 2 and tokens[1] == "*" and tokens[0] not in ("*", ">"):
        return f"{tokens[0]}.>"
    return ".".join(tokens)


def event_name(subject: str) -> str:
    """The envelope's ``event``: the subject without its domain prefix.

    ``prx.lifecycle.tool_call`` -> ``tool_call``; ``eva.turn.completed`` ->
    ``turn.completed``; ``eva.custom.deploy`` -> ``custom.deploy``. Other
    subjects lose their first token (``acme.build.done`` -> ``build.done``);
    a one-token subject is its own name.
    """
    if subject.startswith(PRX_DOMAIN + ".") and subject.count(".") >= 2:
        return subject[len(PRX_DOMAIN) + 1 :]
    head, sep, rest = subject.partition(".")
    return rest if sep else head


def subject_for(name: str) -> str:
    """The subject of a bare event name: PRX events go under ``prx.lifecycle``."""
    if name in _PRX_EVENT_SET:
        return f"{PRX_DOMAIN}.{name}"
    return validate_subject(name)


def matches(pattern: str, subject: str) -> bool:
    """Whether a NATS ``pattern`` (already normalised) matches ``subject``."""
    ptoks = pattern.split(".")
    stoks = subject.split(".")
    for index, ptok in enumerate(ptoks):
        if ptok == ">":
            return len(stoks) > index
        if index >= len(stoks) or (ptok != "*" and ptok != stoks[index]):
            return False
    return len(ptoks) == len(stoks)


#: Events a Bus that knows its NATS user publishes go out on ``hookbus.from.<user>.<subject>``; the shipped
#: permissions let each user publish only under its own user token, so the subject vouches for the publisher
#: (docs/protocol.md, Publisher identity). Receivers hand the event on under ``<subject>``.
VOUCHED_PREFIX = "hookbus.from"
_VOUCHED_ROOT = VOUCHED_PREFIX + "."
#: Split vouched subjects remembered (bounded; cleared when full), as (user, subject).
_split: dict[str, tuple[str, str] | None] = {}


def wire_subject(user: str | None, subject: str) -> str:
    """The subject an event of ``subject`` goes out on: vouched as ``user``, or plain without one (internal: plain)."""
    return subject if user is None or subject.startswith(INTERNAL_PREFIXES) else f"{_VOUCHED_ROOT}{user}.{subject}"


def is_vouched(subject: str) -> bool:
    """Whether a received subject is in the vouched form (then :func:`split_vouched` says by whom)."""
    return subject.startswith(_VOUCHED_ROOT)


def split_vouched(subject: str) -> tuple[str, str] | None:
    """``(user, event subject)`` of a vouched subject, or None when it is malformed.

    The user is one token; the event subject must itself be valid and not
    internal (an event cannot be vouched into hookbus's own plumbing).
    """
    if subject in _split:
        return _split[subject]
    user, dot, rest = subject[len(_VOUCHED_ROOT) :].partition(".")
    ok = subject.startswith(_VOUCHED_ROOT) and dot and TOKEN_RE.fullmatch(user) and _SUBJECT_RE.fullmatch(rest)
    found = (user, rest) if ok and not rest.startswith(INTERNAL_PREFIXES) else None
    if len(_split) >= _RECEIVED_CACHE_SIZE:
        _split.clear()
    _split[subject] = found
    return found


def vouched_pattern(pattern: str) -> str | None:
    """The pattern of the vouched events a subscription on ``pattern`` also gets, or None (internal patterns).

    ``eva.>`` -> ``hookbus.from.*.eva.>``; ``>`` -> ``hookbus.from.*.>``; ``hookbus.>`` names the vouched
    subjects itself, and ``_INBOX``/``$`` subjects are never events: None.
    """
    if pattern.startswith(INTERNAL_PREFIXES) or pattern in ("hookbus", "_INBOX"):
        return None
    return f"{_VOUCHED_ROOT}*.{pattern}"


def publisher_token(origin: str | None) -> str | None:
    """The user a Bus's events are vouched as: its inbox user (``origin``) when that is one token, else None."""
    return origin if origin is not None and TOKEN_RE.fullmatch(origin) else None


#: Subjects that are NATS's or hookbus's own plumbing, not events: reply inboxes, JetStream,
#: KV, object store and system traffic (every ``$`` subject), and hookbus's middleware
#: requests, registry, turns and journal (``hookbus.``). Only a pattern that names them gets them.
INTERNAL_PREFIXES = ("_INBOX.", "$", "hookbus.")


#: Every reply subject lies under this root (docs/protocol.md, Connections and reply inboxes).
REPLY_ROOT = "_INBOX."


def is_reply_inbox(subject: str) -> bool:
    """Whether a request's reply subject may be answered: an inbox, and no wildcard.

    ``allow_responses`` lets a responder publish to whatever reply subject it
    was handed, so a requester could aim the answer at a subject only the
    responder may write (a registry key, a journal subject, a turn request):
    responders answer inboxes only.
    """
    return (
        subject.startswith(REPLY_ROOT) and len(subject) > len(REPLY_ROOT) and "*" not in subject and ">" not in subject
    )


def is_internal(subject: str) -> bool:
    """Whether ``subject`` is plumbing (see INTERNAL_PREFIXES) rather than an event."""
    return subject.startswith(INTERNAL_PREFIXES)


def hides_internal(pattern: str) -> bool:
    """Whether a subscription on ``pattern`` must skip internal subjects: it starts with a wildcard.

    ``>``, ``*.>`` or ``*.mw.*`` would otherwise match them; ``hookbus.>`` or
    ``_INBOX.>`` name them and get them.
    """
    return pattern[:1] in ("*", ">") and pattern[1:2] in ("", ".")


#: Middleware requests to a module go to ``hookbus.mw.<module>`` (queue group of the same name).
MIDDLEWARE_PREFIX = "hookbus.mw"
#: Published when a stage's chain is disabled (cycle, dangling reference), and when it works again.
BROKEN_SET = "eva.broken.set"
BROKEN_CLEARED = "eva.broken.cleared"
#: Published when a middleware module appears, and when it is detached (gone fail-open, or by an operator).
MODULE_ATTACHED = "eva.module.attached"
MODULE_DETACHED = "eva.module.detached"


def module_subject(module: str) -> str:
    """The request subject (and queue group) of a middleware module."""
    if not TOKEN_RE.fullmatch(module):
        raise SubjectError(module, "a module name must match [A-Za-z0-9_-]+")
    return f"{MIDDLEWARE_PREFIX}.{module}"


#: The KV buckets of the middleware registry: announcements, operator trust, guard records.
MODULES_BUCKET = "hookbus_modules"
TRUST_BUCKET = "hookbus_trust"
GUARDS_BUCKET = "hookbus_guards"
#: Handler records (docs/records.md): drafts anyone allowed may write, ``<name>`` each, and the copies the
#: record runner keeps of the versions operators approved (only runners and operators write those).
RECORDS_BUCKET = "hookbus_records"
RECORDS_APPROVED_BUCKET = "hookbus_records_approved"
#: Asks held for an operator's answer (docs/middleware.md, Asks): write-once keys ``ask.<user>.<id>``
#: (the asking kernel), ``answer.<user>.<id>`` (operators only), ``done.<user>.<id>`` (the asking kernel).
ASKS_BUCKET = "hookbus_asks"
#: Standing rules operators made from an answer (``hookbus allow --remember``): write-once keys without a
#: time to live, ``rule.<user>.<id>`` and ``revoked.<user>.<id>``, written by operators only.
ASK_RULES_BUCKET = "hookbus_ask_rules"
#: The budgets' books (docs/stages.md#budgets): a counter bucket per layer, keys ``<day>.<key>.<writer>`` (the
#: UTC day, the layer's key as one token, the NATS user that spent), each written only by its writer.
BUDGET_BUCKETS = {layer: f"hookbus_budget_{layer}" for layer in ("session", "group", "user")}


#: Seconds a book is kept: the day it counts and the next (older days are never read).
BUDGET_MAX_AGE_S = 2 * 86400.0
#: Rule files (docs/rules.md): ``<file stem>`` -> the file's YAML text, written by operators only.
RULES_BUCKET = "hookbus_rules"
#: The event a kernel emits when it holds a call for an operator.
ASK_REQUESTED = "eva.ask.requested"


def kv_stream(bucket: str) -> str:
    """The JetStream stream behind a KV bucket (JetStream's own layout)."""
    return f"KV_{bucket}"


def kv_key_subject(bucket: str, key: str = "") -> str:
    """The subject a KV bucket stores ``key`` on (JetStream's own layout); with no key, the prefix."""
    return f"$KV.{bucket}.{key}"


def kv_bucket_of_stream(stream: str) -> str:
    """The bucket whose stream is ``stream`` (:func:`kv_stream` undone; any other name as it is)."""
    return stream[len("KV_") :] if stream.startswith("KV_") else stream


#: The JetStream API prefix of the server a client is connected to (its own domain's).
JS_API = "$JS.API"


def direct_get_subject(stream: str, api: str = JS_API) -> str:
    """The JetStream API subject of a (batched) direct get on ``stream``, under API prefix ``api``."""
    return f"{api}.DIRECT.GET.{stream}"


def js_domain_api(domain: str) -> str:
    """The API prefix reaching JetStream domain ``domain`` from any server linked to it."""
    return f"$JS.{domain}.API"


def kv_key_subject_via(api: str, bucket: str) -> str:
    """Where writes to ``bucket`` go through JetStream API prefix ``api`` (another domain's: ADR-8's layout
    for a mirrored bucket), up to the key."""
    return f"{api}.{kv_key_subject(bucket)}"


#: The JetStream object store holding whole payloads of events over the size limit (the claim check,
#: docs/protocol.md): the envelope carries a reference to one of its objects and a preview.
PAYLOADS_BUCKET = "hookbus_payloads"
#: Its stream and subjects, per publisher: ``<chunks>.<user>`` holds the chunks of every object ``user`` put,
#: ``<metas>.<user>`` their metas (size, digest, the chunks' sequences); an object is named by its meta's sequence.
PAYLOADS_STREAM = "OBJ_hookbus_payloads"
PAYLOADS_CHUNKS = "$O.hookbus_payloads.C"
PAYLOADS_METAS = "$O.hookbus_payloads.M"


def payload_subjects(publisher: str) -> tuple[str, str]:
    """Where ``publisher`` (its NATS user's tokens) puts the chunks and the metas of its whole payloads."""
    return f"{PAYLOADS_CHUNKS}.{publisher}", f"{PAYLOADS_METAS}.{publisher}"


#: Where readers fetch an object's meta and chunks: JetStream's direct get on the stream.
PAYLOADS_DIRECT_GET = "$JS.API.DIRECT.GET.OBJ_hookbus_payloads"
#: The agent-metrics subscriber's queue group.
AGENT_METRICS_QUEUE = "hookbus-agent-metrics"
#: Every process's batched counters (drops, truncations, deliveries, middleware reactions) go to
#: ``hookbus.counters[.<origin>]``, the origin being its NATS user as for the journal (docs/metrics.md).
COUNTERS_PREFIX = "hookbus.counters"


def counters_subject(origin: str | None) -> str:
    """Where a process whose NATS user is ``origin`` (None: no user) sends its counters."""
    return f"{COUNTERS_PREFIX}.{origin}" if origin else COUNTERS_PREFIX


#: Hex digits of the key's hash in a per-key queue group (64 bits: no two keys of a workspace collide).
_KEY_QUEUE_HASH_CHARS = 16


def key_queue(group: str, key: str) -> str:
    """The NATS queue group one key (a hook key, a handler, a trigger) of ``group`` subscribes in.

    NATS hands a message to one member of a queue group, whatever pattern each
    member subscribed with: keys sharing one group would split an event that
    matches several of them. So each key gets its own group, ``<group>-`` plus
    16 hex digits of the SHA-256 of the key; workers sharing ``group`` and
    holding the same key share that key's events, and an event matching
    several keys runs each key once. Callers pass a normalised key (the NATS
    pattern of a hooks.json key) so that spellings of one key share a group.
    """
    if not TOKEN_RE.fullmatch(group):
        raise SubjectError(group, "a queue group name must match [A-Za-z0-9_-]+")
    digest = hashlib.sha256(key.encode()).hexdigest()[:_KEY_QUEUE_HASH_CHARS]
    return f"{group}-{digest}"


#: Processes on the bus (``hookbus up``, workers, sinks, agents) say they are alive here, one key each,
#: ``<user>.<instance>`` (``hookbus status`` reads it; modules announce in MODULES_BUCKET instead).
PRESENCE_BUCKET = "hookbus_presence"
