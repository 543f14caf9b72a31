"""The event envelope: the decoded event, and the one receive check of what crosses the bus.

Wire form (one JSON object, orjson)::

    {"event": NAME, "timestamp": "2026-03-21T08:15:30.123Z", "session_id": str|null,
     "payload": {...}, "id": str, "depth": int}

plus optional ``"source"`` (the emitting client's name) and ``"truncated": true``
(string values were cut to fit the size limit). ``NAME`` is the subject without
its domain prefix (see :func:`bus._core.subjects.event_name`).

An event over the limit keeps its payload whole in the object store when the
emitter has one (the claim check, :mod:`bus._core.claim`): its envelope then
carries ``"payload_ref"`` and a preview cut to fit, and
:meth:`Event.full_payload` fetches the whole. Without one, the largest strings
are cut in proportion to their sizes so that the envelope uses the limit.

Receivers also take what PRX publishers send (docs/events.md, "From PRX
publishers"): an envelope without ``id`` or ``depth``, and a bare payload
object on ``prx.lifecycle.<event>``. Those are completed on receipt and
flagged in ``received_as``; they are tried only after the fast check failed.

The wire type is declared once, ``EnvelopeMsg`` in :mod:`bus._core.envelope_schema`;
the receive check here is hand-written for the delivery path (no msgspec at
import) and held to that type by tests/core/test_envelope_one_type.py. Encoding is
:mod:`bus._core.encoder`'s; cutting strings to fit, :mod:`bus._core.truncation`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NotRequired, TypedDict

import orjson

from bus._core.clock import IdSource, now_timestamp
from bus._core.depth import DEFAULT_MAX_DEPTH, depth_problem
from bus._core.errors import EnvelopeError, PayloadRefError
from bus._core.subjects import PRX_DOMAIN, known_event_name, received_event_name, subject_problem
from bus._core.traceparent import valid_traceparent

if TYPE_CHECKING:  # not at run time: hookbus emit loads this module and must load fast (no asyncio, msgspec)
    import asyncio

    from bus._core.envelope_schema import PayloadRefMsg, ReceivedAs

#: Default limit on an encoded event, as in the PRX document (64 KB).
DEFAULT_MAX_BYTES: Final = 64 * 1024
_dumps = orjson.dumps
_loads = orjson.loads
_known_event_name = known_event_name


class EventDict(TypedDict):
    """The envelope as it crosses the wire."""

    event: str
    timestamp: str
    session_id: str | None
    payload: dict[str, Any]
    id: str
    depth: int
    source: NotRequired[str]
    truncated: NotRequired[bool]
    payload_ref: NotRequired[dict[str, Any]]
    traceparent: NotRequired[str]
    received_as: NotRequired[str]


#: Fetches the whole payload a reference names, checked (``loader(subject, ref)``); the receiving Bus's.
PayloadLoader = Callable[[str, "PayloadRefMsg"], Awaitable[dict[str, Any]]]


@dataclass(slots=True)
class Event:
    """A decoded event, as handed to subscribers."""

    subject: str
    event: str
    timestamp: str
    session_id: str | None
    payload: dict[str, Any]
    id: str
    depth: int
    source: str | None = None
    truncated: bool = False
    #: The exact bytes received (what shell hooks get as their payload); for a message the
    #: receiver completed (``received_as``), the completed envelope.
    raw: bytes = b""
    #: Set by the receiver, never taken from the sender: ``prx-envelope`` or ``prx-payload`` when
    #: it completed a PRX publisher's message (bus._core.envelope_schema.ReceivedAs), else None.
    received_as: ReceivedAs | None = None
    #: Set when ``payload`` is a preview and the whole payload is in the object store (the claim check).
    payload_ref: PayloadRefMsg | None = None
    #: The emitter's W3C trace context when it traces (bus._runtime.tracing); only a valid one is kept.
    traceparent: str | None = None
    #: The NATS user that published it, as the subject it arrived on vouches (``hookbus.from.<user>.<subject>``,
    #: which the permissions let only that user publish); None when it came on the plain subject. Set by the
    #: receiver, never taken from the body, and not part of :meth:`to_dict` (docs/protocol.md, Publisher identity).
    publisher: str | None = None
    #: What fetches a claimed payload (set by the subscription that received it); None: nothing can.
    loader: PayloadLoader | None = field(default=None, compare=False, repr=False)
    _whole: asyncio.Future[dict[str, Any]] | None = field(default=None, init=False, compare=False, repr=False)

    def to_dict(self) -> EventDict:
        """The envelope as a dict, as it was on the wire."""
        out: EventDict = {
            "event": self.event,
            "timestamp": self.timestamp,
            "session_id": self.session_id,
            "payload": self.payload,
            "id": self.id,
            "depth": self.depth,
        }
        if self.source is not None:
            out["source"] = self.source
        if self.truncated:
            out["truncated"] = True
        if self.received_as is not None:
            out["received_as"] = self.received_as
        if self.payload_ref is not None:
            out["payload_ref"] = ref_json(self.payload_ref)
        if self.traceparent is not None:
            out["traceparent"] = self.traceparent
        return out

    async def full_payload(self) -> dict[str, Any]:
        """The whole payload: ``payload`` itself, or the object a claimed event refers to (fetched once, checked).

        Raises PayloadRefError naming what was wrong: a refused reference, a
        missing object, or bytes that are not what the reference names.
        """
        ref = self.payload_ref
        if ref is None:
            return self.payload
        import asyncio  # here, not at module load: see TYPE_CHECKING above

        if self._whole is None:
            if self.loader is None:
                raise PayloadRefError(self.subject, "this event did not come from a bus: nothing can fetch its payload")
            self._whole = asyncio.ensure_future(self.loader(self.subject, ref))
        return await asyncio.shield(self._whole)

    async def full_raw(self) -> bytes:
        """The envelope with the whole payload and without ``truncated`` (``raw`` itself unless claimed)."""
        if self.payload_ref is None:
            return self.raw
        envelope: dict[str, Any] = dict(self.to_dict())
        envelope["payload"] = await self.full_payload()
        envelope.pop("truncated", None)
        return _dumps(envelope)


def ref_json(ref: PayloadRefMsg) -> Any:
    """A claim-check reference as plain JSON values (msgspec is loaded on this slow path only)."""
    import msgspec

    return msgspec.to_builtins(ref)


def _check_field(obj: dict[str, Any], subject: str, name: str, kind: type | tuple[type, ...]) -> None:
    if name not in obj:
        raise EnvelopeError(subject, f"missing field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise EnvelopeError(subject, f"field {name!r} has type {type(value).__name__}")


def _decode_other(subject: str, obj: dict[str, Any], data: bytes, max_depth: int, expected: str) -> Event:
    """An object the fast check refused: a PRX publisher's shape, completed, or an EnvelopeError naming the field.

    On ``prx.lifecycle.<event>`` an object with neither ``event`` nor ``payload``
    is a bare payload (what PRX's agent publishes there). Anything else must be
    an envelope, where ``id`` and ``depth`` may be missing (PRX's documented
    envelope): present fields are checked as always, a missing depth is 0 and
    a missing id is assigned here.
    """
    if "event" not in obj and "payload" not in obj and subject.startswith(_PRX_PREFIX):
        return _completed(subject, expected, now_timestamp(), None, obj, _receipt_id(), 0, None, False, _AS_PAYLOAD)
    for name, kind in _FIELDS:
        if name in obj or name not in _FILLED_IN:
            _check_field(obj, subject, name, kind)
    depth = obj.get("depth", 0)
    problem = depth_problem(depth, max_depth)
    if problem is not None:
        raise EnvelopeError(subject, problem, "depth")
    if obj["event"] != expected:
        raise EnvelopeError(subject, f"field 'event' is {obj['event']!r}, the subject says {expected!r}")
    source = obj.get("source")
    if source is not None and type(source) is not str:
        raise EnvelopeError(subject, f"field 'source' has type {type(source).__name__}")
    stamp, session, payload = obj["timestamp"], obj["session_id"], obj["payload"]
    truncated = obj.get("truncated") is True
    ident = obj["id"] if "id" in obj else _receipt_id()
    event = Event(subject, expected, stamp, session, payload, ident, depth, source, truncated, data)
    _read_optional(subject, obj, event)
    if "id" in obj and "depth" in obj:  # nothing to complete (the fast check refuses nothing this accepts)
        return event
    event.received_as = _AS_ENVELOPE
    event.raw = _dumps(event.to_dict())  # hooks read one shape: the completed envelope
    return event


def _read_optional(subject: str, obj: dict[str, Any], event: Event) -> None:
    """The optional fields that have a type of their own: ``payload_ref`` (refused if malformed) and
    ``traceparent`` (a malformed one is ignored, as the W3C asks of a receiver, not refused)."""
    ref = obj.get("payload_ref")
    if ref is not None:
        event.payload_ref = _payload_ref(subject, ref)
    traceparent = obj.get("traceparent")
    if traceparent is not None:
        event.traceparent = valid_traceparent(traceparent)


def _completed(
    subject: str,
    name: str,
    stamp: str,
    session: str | None,
    payload: dict[str, Any],
    ident: str,
    depth: int,
    source: str | None,
    truncated: bool,
    received_as: ReceivedAs,
) -> Event:
    """An event the receiver completed from a bare payload; its ``raw`` is the completed envelope, so hooks read
    one shape."""
    event = Event(subject, name, stamp, session, payload, ident, depth, source, truncated, received_as=received_as)
    event.raw = _dumps(event.to_dict())
    return event


def _payload_ref(subject: str, ref: object) -> PayloadRefMsg:
    """A received ``payload_ref`` as its type (only its shape: the receiver checks the rest before fetching)."""
    try:
        from bus._core.envelope_schema import PayloadRefMsg
        from bus._core.schema import convert

        return convert(ref, PayloadRefMsg, "field 'payload_ref'", ValueError)
    except ValueError as exc:
        raise EnvelopeError(subject, str(exc)) from None


_FIELDS: Final = (
    ("event", str),
    ("timestamp", str),
    ("session_id", (str, type(None))),
    ("payload", dict),
    ("id", str),
    ("depth", int),
)
#: The fields a PRX publisher's envelope may lack: the receiver fills them in.
_FILLED_IN: Final = frozenset(("id", "depth"))
_PRX_PREFIX: Final = PRX_DOMAIN + "."
#: Ids of events completed on receipt (one per process; unique like the encoders' ids).
_receipt_id = IdSource()
_AS_ENVELOPE: Final[ReceivedAs] = "prx-envelope"
_AS_PAYLOAD: Final[ReceivedAs] = "prx-payload"


def decode_event(
    subject: str, data: bytes, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> Event:
    """Decode and check envelope bytes received on ``subject``, as if the sender were hostile.

    Raises EnvelopeError naming what is wrong and the drop reason to count it
    under: over ``max_bytes`` (``oversize``); a depth out of range, at or over
    ``max_depth`` included (``depth``); a subject breaking the token rules, not
    UTF-8 JSON, not an object, a missing field, a field of the wrong type, or an
    ``event`` that is not the subject's (``malformed``).
    """
    if len(data) > max_bytes:
        raise EnvelopeError(subject, f"{len(data)} bytes, over the {max_bytes}-byte limit", "oversize")
    expected = _known_event_name(subject) or received_event_name(subject)
    if expected is None:
        raise EnvelopeError(subject, f"subject refused: {subject_problem(subject)}")
    try:
        obj = _loads(data)
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(subject, f"not JSON, or not UTF-8 ({exc})") from None
    if type(obj) is not dict:
        raise EnvelopeError(subject, f"expected a JSON object, got {type(obj).__name__}")
    try:  # subscripts are cheaper than .get(); a missing field goes the slow way
        name, stamp, session = obj["event"], obj["timestamp"], obj["session_id"]
        payload, ident, depth = obj["payload"], obj["id"], obj["depth"]
    except KeyError:
        return _decode_other(subject, obj, data, max_depth, expected)
    source = obj.get("source")
    if (
        name == expected
        and type(stamp) is str
        and (session is None or type(session) is str)
        and type(payload) is dict
        and type(ident) is str
        and type(depth) is int
        and 0 <= depth < max_depth
        and (source is None or type(source) is str)
    ):
        event = Event(subject, name, stamp, session, payload, ident, depth, source, obj.get("truncated") is True, data)
        if len(obj) > 6:  # only then can an optional field with a type of its own be there
            _read_optional(subject, obj, event)
        return event
    return _decode_other(subject, obj, data, max_depth, expected)
