"""The event envelope: the one codec for what crosses the bus.

Wire form (one JSON object, orjson)::

    {"event": NAME, "timestamp": "2026-03-21T08:15:30.123Z", "session_id": str|null,
     "payload": {...}, "id": str, "depth": int}

plus optional ``"source"`` (the emitting client's name) and ``"truncated": true``
(string values were cut to fit the size limit). ``NAME`` is the subject without
its domain prefix (see :func:`bus.core.subjects.event_name`).

An event over the limit keeps its payload whole in the object store when the
emitter has one (the claim check, :mod:`bus.core.claim`): its envelope then
carries ``"payload_ref"`` and a preview cut to fit, and
:meth:`Event.full_payload` fetches the whole. Without one, the largest strings
are cut in proportion to their sizes so that the envelope uses the limit.

Receivers also take what PRX publishers send (docs/events.md, "From PRX
publishers"): an envelope without ``id`` or ``depth``, and a bare payload
object on ``prx.lifecycle.<event>``. Those are completed on receipt and
flagged in ``received_as``; they are tried only after the fast check failed.

Encoding is on the agent's hot path, so the per-subject head of the object is
built once and cached, the timestamp string is reused within a millisecond,
and ids are a random per-process prefix plus a counter.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NotRequired, TypedDict

import orjson

from bus.core.clock import IdSource, format_timestamp, now_timestamp
from bus.core.depth import DEFAULT_MAX_DEPTH, depth_problem
from bus.core.errors import EnvelopeError, NotSerializableError, PayloadError, PayloadRefError, PayloadTooLarge
from bus.core.subjects import (
    PRX_DOMAIN,
    event_name,
    known_event_name,
    received_event_name,
    subject_problem,
    validate_subject,
)
from bus.core.traceparent import valid_traceparent

if TYPE_CHECKING:  # not at run time: hookbus emit encodes with this module and must load fast (no asyncio, msgspec)
    import asyncio

    from bus.core.envelope_schema import PayloadRefMsg, ReceivedAs

#: Default limit on an encoded event, as in the PRX document (64 KB).
DEFAULT_MAX_BYTES: Final = 64 * 1024
#: Strings shorter than this are never cut when truncating.
_MIN_CUT_CHARS: Final = 64
#: Attempts at cutting strings in proportion before an event is found too large (two suffice in practice).
_FIT_TRIES: Final = 8
#: Bytes the ``"truncated":true`` flag adds to an envelope.
_FLAG_ROOM: Final = len(b',"truncated":true')
_dumps = orjson.dumps
_loads = orjson.loads
_time = time.time
_known_event_name = known_event_name
#: The envelope after its cached head: timestamp, session, payload, id, depth, tail.
_ENVELOPE: Final = b'%s%s","session_id":%s,"payload":%s,"id":"%s%x","depth":%s%s'
#: Depths as they are written (formatting an int into bytes costs more than the lookup).
_DEPTH_BYTES: Final = {depth: b"%d" % depth for depth in range(64)}
#: How many distinct subjects the encoder remembers as already validated.
_SUBJECT_CACHE_SIZE: Final = 4096


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
    #: it completed a PRX publisher's message (bus.core.envelope_schema.ReceivedAs), else None.
    received_as: ReceivedAs | None = None
    #: Set when ``payload`` is a preview and the whole payload is in the object store (the claim check).
    payload_ref: PayloadRefMsg | None = None
    #: The emitter's W3C trace context when it traces (bus.runtime.tracing); only a valid one is kept.
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
            out["payload_ref"] = _builtins(self.payload_ref)
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


class Encoder:
    """Builds envelope bytes; one per Bus (it caches per-subject heads)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, source: str | None = None, *, cut: bool = True) -> None:
        if max_bytes < 512:
            raise ValueError(f"max_bytes={max_bytes} is too small: an envelope needs room")
        self.max_bytes = max_bytes
        #: False: ``encode`` returns an oversized envelope as it is (flagged), for a caller that claims it
        #: (keeps the payload in the object store) or calls :meth:`fit`.
        self.cut = cut
        self._heads: dict[str, bytes] = {}
        self._tail = b',"source":' + orjson.dumps(source) + b"}" if source else b"}"
        #: Event ids; ``new_id()`` and the envelopes share its counter, so no two ids repeat.
        self.new_id = IdSource()
        self._id_prefix = self.new_id.prefix_bytes
        self._counter = self.new_id.counter
        self._ts_next = 0.0
        self._ts_bytes = b""
        self._last_session: str | None = None
        self._last_session_bytes = b"null"

    def head(self, subject: str) -> bytes:
        """Validate ``subject`` (once) and return the cached start of its envelope."""
        head = self._heads.get(subject)
        if head is None:
            validate_subject(subject)
            if len(self._heads) >= _SUBJECT_CACHE_SIZE:
                self._heads.clear()
            head = b'{"event":' + orjson.dumps(event_name(subject)) + b',"timestamp":"'
            self._heads[subject] = head
        return head

    def _refresh_timestamp(self, now: float) -> None:
        epoch_ms = int(now * 1000)
        self._ts_bytes = format_timestamp(epoch_ms).encode()
        self._ts_next = (epoch_ms + 1) / 1000

    def encode(
        self,
        subject: str,
        payload: Mapping[str, Any],
        session_id: str | None,
        depth: int,
        traceparent: str | None = None,
    ) -> tuple[bytes, bool]:
        """Encode an event; returns ``(bytes, oversize)``: an oversized one comes back cut to fit (see :meth:`fit`).

        With ``cut`` False an oversized envelope comes back whole, for the caller to claim or fit.
        ``traceparent`` (a valid W3C value, from :func:`bus.runtime.tracing.current_traceparent`) is sent
        beside the payload; an oversized event's cut or claimed envelope goes without it.
        Raises SubjectError, NotSerializableError or PayloadTooLarge for caller bugs.
        """
        head = self._heads.get(subject) or self.head(subject)
        if type(payload) is dict:
            try:
                body = _dumps(payload)
            except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
                raise NotSerializableError(subject, f"not JSON-serialisable: {exc}") from None
        else:
            body = _dump_payload(subject, payload)
        if session_id is None:
            sid = b"null"
        elif session_id is self._last_session:  # an agent emits many events of one session
            sid = self._last_session_bytes
        elif type(session_id) is str:
            sid = self._last_session_bytes = _dumps(session_id)
            self._last_session = session_id
        else:
            raise PayloadError(subject, f"session_id must be a string or None, not {type(session_id).__name__}")
        now = _time()
        if now >= self._ts_next:
            self._refresh_timestamp(now)
        depth_bytes = _DEPTH_BYTES.get(depth) or b"%d" % depth
        tail = self._tail if traceparent is None else b',"traceparent":"%s"%s' % (traceparent.encode(), self._tail)
        data = _ENVELOPE % (head, self._ts_bytes, sid, body, self._id_prefix, self._counter(), depth_bytes, tail)
        if len(data) <= self.max_bytes:
            return data, False
        if not self.cut:
            return data, True
        return self.fit(subject, payload, session_id, depth, len(data)), True

    def fit(
        self,
        subject: str,
        payload: Mapping[str, Any],
        session_id: str | None,
        depth: int,
        size: int,
        ref: PayloadRefMsg | None = None,
    ) -> bytes:
        """The envelope of an event ``size`` bytes long, flagged ``truncated``, its largest strings cut to fit.

        The strings are cut in proportion to their sizes so that the envelope
        uses the limit (a 1 MiB string keeps about the limit, less the rest of
        the envelope). With ``ref`` (a claimed event) the envelope carries it
        and the payload is a preview, empty when no string can be cut enough.
        Raises PayloadTooLarge when nothing makes the envelope fit.
        """
        cutter = StringCutter(_loads(_dump_payload(subject, payload)))
        ref_room = 0 if ref is None else len(_dumps(_builtins(ref))) + len(b',"payload_ref":')
        excess, last = size - self.max_bytes + _FLAG_ROOM + ref_room, size
        for _ in range(_FIT_TRIES):
            if not cutter.cut(excess):
                break
            data = self._encode_flagged(subject, cutter.value, session_id, depth, ref)
            if len(data) <= self.max_bytes:
                return data
            if len(data) >= last:  # every string is as short as it may be
                break
            excess, last = excess + len(data) - self.max_bytes, len(data)
        if ref is not None:
            data = self._encode_flagged(subject, {}, session_id, depth, ref)
            if len(data) <= self.max_bytes:
                return data
        raise PayloadTooLarge(subject, size, self.max_bytes)

    def _encode_flagged(
        self, subject: str, payload: Any, session_id: str | None, depth: int, ref: PayloadRefMsg | None = None
    ) -> bytes:
        envelope = {
            "event": event_name(subject),
            "timestamp": self._ts_bytes.decode(),
            "session_id": session_id,
            "payload": payload,
            "id": self.new_id(),
            "depth": depth,
            "truncated": True,
        }
        if ref is not None:
            envelope["payload_ref"] = _builtins(ref)
        return orjson.dumps(envelope)[:-1] + self._tail


def _builtins(ref: PayloadRefMsg) -> Any:
    """A claim-check reference as plain JSON values (msgspec is loaded on this slow path only)."""
    import msgspec

    return msgspec.to_builtins(ref)


def _dump_payload(subject: str, payload: Mapping[str, Any]) -> bytes:
    if type(payload) is not dict:
        if not isinstance(payload, Mapping):
            raise PayloadError(subject, f"must be a JSON object (dict), not {type(payload).__name__}")
        payload = dict(payload)
    try:
        return orjson.dumps(payload)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise NotSerializableError(subject, f"not JSON-serialisable: {exc}") from None


def truncation_marker(cut_bytes: int) -> str:
    """The text that replaces the middle of a cut string."""
    return f"…[hookbus: {cut_bytes} bytes cut]…"


#: Bytes a marker may take (its count has at most this many digits).
_MARKER_ROOM: Final = len(truncation_marker(10**12).encode())


class StringCutter:
    """The long strings of a payload (a private copy, cut in place), shortened in proportion to their sizes.

    Each :meth:`cut` starts again from the original strings, so a cut string
    carries one marker naming exactly how many bytes it lost.
    """

    def __init__(self, value: Any) -> None:
        self.value = value
        #: (container, key, original text, its UTF-8 size, its size inside JSON), largest first.
        self._strings = sorted(_long_strings(value), key=lambda found: -found[4])

    def cut(self, excess: int) -> bool:
        """Shorten the largest strings by about ``excess`` JSON bytes in all; False if no string is long enough.

        Each chosen string loses a share of ``excess`` (plus its marker) in
        proportion to its size; a string whose share would not pay for its
        marker is left alone.
        """
        chosen = self._strings
        while chosen:
            need = excess + len(chosen) * _MARKER_ROOM
            total = sum(found[4] for found in chosen)
            if len(chosen) == 1 or need * chosen[-1][4] >= 2 * _MARKER_ROOM * total:
                break
            chosen = chosen[:-1]
        if not chosen:
            return False
        for container, key, text, _, _ in self._strings:
            container[key] = text
        for container, key, text, utf8_size, json_size in chosen:
            share = -(-need * json_size // total)  # JSON bytes, rounded up
            container[key] = _cut_text(text, -(-share * utf8_size // json_size))
        return True


def _cut_text(text: str, cut_bytes: int) -> str:
    """``text`` without about ``cut_bytes`` UTF-8 bytes from its middle, a marker in their place."""
    encoded = text.encode()
    cut = min(len(encoded) - _MIN_CUT_CHARS, cut_bytes)
    if cut <= 0:
        return text
    keep = len(encoded) - cut
    head = encoded[: keep // 2].decode(errors="ignore")
    tail = encoded[len(encoded) - (keep - keep // 2) :].decode(errors="ignore")
    return head + truncation_marker(len(encoded) - len(head.encode()) - len(tail.encode())) + tail


def _long_strings(value: Any) -> list[tuple[Any, Any, str, int, int]]:
    """Every string of ``value`` longer than the shortest one ever cut, with where it is and its sizes."""
    found: list[tuple[Any, Any, str, int, int]] = []
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(item, str):
                if len(item) > _MIN_CUT_CHARS:
                    found.append((node, key, item, len(item.encode()), len(_dumps(item)) - 2))
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return found


def _largest_string(value: Any) -> tuple[Any, Any, str] | None:
    """The longest string of ``value`` over the shortest one ever cut, with its container and key (output drain)."""
    best: tuple[Any, Any, str] | None = None
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(item, str):
                if len(item) > _MIN_CUT_CHARS and (best is None or len(item) > len(best[2])):
                    best = (node, key, item)
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return best


def payload_bytes(subject: str, payload: Mapping[str, Any]) -> bytes:
    """A payload's JSON bytes, as an envelope carries them and the object store keeps them whole."""
    return _dump_payload(subject, payload)


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
    if "id" in obj and "depth" in obj:  # nothing to complete (the fast check refuses nothing this accepts)
        event = Event(subject, expected, stamp, session, payload, obj["id"], depth, source, truncated, data)
        event.traceparent = valid_traceparent(obj.get("traceparent"))
        return event
    ident = obj["id"] if "id" in obj else _receipt_id()
    return _completed(subject, expected, stamp, session, payload, ident, depth, source, truncated, _AS_ENVELOPE)


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
    """An event the receiver completed; its ``raw`` is the completed envelope, so hooks read one shape."""
    event = Event(subject, name, stamp, session, payload, ident, depth, source, truncated, received_as=received_as)
    event.raw = _dumps(event.to_dict())
    return event


def _payload_ref(subject: str, ref: object) -> PayloadRefMsg:
    """A received ``payload_ref`` as its type (only its shape: the receiver checks the rest before fetching)."""
    try:
        from bus.core.envelope_schema import PayloadRefMsg
        from bus.core.schema import convert

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


def decode(subject: str, data: bytes, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH) -> Event:
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
        ref = obj.get("payload_ref")
        if ref is not None:
            event.payload_ref = _payload_ref(subject, ref)
        traceparent = obj.get("traceparent")
        if traceparent is not None:
            event.traceparent = valid_traceparent(traceparent)  # a malformed one is ignored (W3C), not refused
        return event
    return _decode_other(subject, obj, data, max_depth, expected)
