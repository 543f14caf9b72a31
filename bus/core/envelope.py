"""The event envelope: the one codec for what crosses the bus.

Wire form (one JSON object, orjson)::

    {"event": NAME, "timestamp": "2026-03-21T08:15:30.123Z", "session_id": str|null,
     "payload": {...}, "id": str, "depth": int}

plus optional ``"source"`` (the emitting client's name) and ``"truncated": true``
(string values were cut to fit the size limit). ``NAME`` is the subject without
its domain prefix (see :func:`bus.core.subjects.event_name`).

Encoding is on the agent's hot path, so the per-subject head of the object is
built once and cached, the timestamp string is reused within a millisecond,
and ids are a random per-process prefix plus a counter.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NotRequired, TypedDict

import orjson

from bus.core.clock import IdSource, format_timestamp
from bus.core.depth import DEFAULT_MAX_DEPTH, depth_problem
from bus.core.errors import EnvelopeError, NotSerializableError, PayloadError, PayloadTooLarge
from bus.core.subjects import event_name, known_event_name, received_event_name, subject_problem, validate_subject

#: Default limit on an encoded event, as in the PRX document (64 KB).
DEFAULT_MAX_BYTES: Final = 64 * 1024
#: Strings shorter than this are never cut when truncating.
_MIN_CUT_CHARS: Final = 64
_dumps = orjson.dumps
_loads = orjson.loads
_time = time.time
_known_event_name = known_event_name
#: The envelope after its cached head: timestamp, session, payload, id, depth, tail.
_ENVELOPE: Final = b'%s%s","session_id":%s,"payload":%s,"id":"%s%x","depth":%d%s'
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
    #: The exact bytes received (what shell hooks get as their payload).
    raw: bytes = b""

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
        return out


class Encoder:
    """Builds envelope bytes; one per Bus (it caches per-subject heads)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, source: str | None = None) -> None:
        if max_bytes < 512:
            raise ValueError(f"max_bytes={max_bytes} is too small: an envelope needs room")
        self.max_bytes = max_bytes
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
        self, subject: str, payload: Mapping[str, Any], session_id: str | None, depth: int
    ) -> tuple[bytes, bool]:
        """Encode an event; returns ``(bytes, truncated)``.

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
        data = _ENVELOPE % (head, self._ts_bytes, sid, body, self._id_prefix, self._counter(), depth, self._tail)
        if len(data) <= self.max_bytes:
            return data, False
        return self._truncated(subject, payload, session_id, depth, len(data)), True

    def _truncated(
        self, subject: str, payload: Mapping[str, Any], session_id: str | None, depth: int, size: int
    ) -> bytes:
        """Cut the largest strings until the envelope fits, or raise PayloadTooLarge."""
        fitted = truncate_strings(orjson.loads(orjson.dumps(payload)), size - self.max_bytes)
        while fitted is not None:
            data = self._encode_flagged(subject, fitted, session_id, depth)
            if len(data) <= self.max_bytes:
                return data
            fitted = truncate_strings(fitted, len(data) - self.max_bytes)
        raise PayloadTooLarge(subject, size, self.max_bytes)

    def _encode_flagged(self, subject: str, payload: Any, session_id: str | None, depth: int) -> bytes:
        envelope = {
            "event": event_name(subject),
            "timestamp": self._ts_bytes.decode(),
            "session_id": session_id,
            "payload": payload,
            "id": self.new_id(),
            "depth": depth,
            "truncated": True,
        }
        return orjson.dumps(envelope)[:-1] + self._tail


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


def truncate_strings(value: Any, excess: int) -> Any | None:
    """Cut the largest string in ``value`` (in place) by at least ``excess`` bytes.

    The string keeps its head and tail around a marker naming how many bytes
    were cut. Returns ``value``, or None when no string is long enough to cut.
    """
    found = _largest_string(value)
    if found is None:
        return None
    container, key, text = found
    encoded = text.encode()
    # Cut the requested excess plus room for the marker and JSON escaping slack.
    cut = min(len(encoded) - _MIN_CUT_CHARS, excess + 64 + excess // 8)
    if cut <= 0:
        return None
    keep = len(encoded) - cut
    head = encoded[: keep // 2].decode(errors="ignore")
    tail = encoded[len(encoded) - (keep - keep // 2) :].decode(errors="ignore")
    container[key] = head + truncation_marker(len(encoded) - len(head.encode()) - len(tail.encode())) + tail
    return value


def _largest_string(value: Any) -> tuple[Any, Any, str] | None:
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


def _check_field(obj: dict[str, Any], subject: str, name: str, kind: type | tuple[type, ...]) -> None:
    if name not in obj:
        raise EnvelopeError(subject, f"missing field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise EnvelopeError(subject, f"field {name!r} has type {type(value).__name__}")


def _reject(subject: str, obj: dict[str, Any], max_depth: int) -> EnvelopeError:
    """Name the first thing wrong with an object that failed the fast check."""
    try:
        for name, kind in _FIELDS:
            _check_field(obj, subject, name, kind)
        problem = depth_problem(obj["depth"], max_depth)
        if problem is not None:
            return EnvelopeError(subject, problem, "depth")
        expected = received_event_name(subject)
        if obj["event"] != expected:
            return EnvelopeError(subject, f"field 'event' is {obj['event']!r}, the subject says {expected!r}")
        raise EnvelopeError(subject, f"field 'source' has type {type(obj.get('source')).__name__}")
    except EnvelopeError as exc:
        return exc


_FIELDS: Final = (
    ("event", str),
    ("timestamp", str),
    ("session_id", (str, type(None))),
    ("payload", dict),
    ("id", str),
    ("depth", int),
)


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
        raise _reject(subject, obj, max_depth) from None
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
        return Event(subject, name, stamp, session, payload, ident, depth, source, obj.get("truncated") is True, data)
    raise _reject(subject, obj, max_depth)
