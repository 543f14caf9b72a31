"""The envelope encoder: event bytes built on the agent's hot path.

The per-subject head of the object is built once and cached, the timestamp
string is reused within a millisecond, and ids are a random per-process prefix
plus a counter. An event over the limit comes back cut to fit
(:mod:`bus._core.truncation`), or whole for the caller to claim (:mod:`bus._core.claim`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from bus._core.clock import IdSource, format_timestamp
from bus._core.envelope import DEFAULT_MAX_BYTES, ref_json
from bus._core.errors import NotSerializableError, PayloadError, PayloadTooLarge
from bus._core.subjects import event_name, validate_subject
from bus._core.truncation import StringCutter

if TYPE_CHECKING:
    from bus._core.envelope_schema import PayloadRefMsg

_dumps = orjson.dumps
_loads = orjson.loads
_time = time.time

#: Attempts at cutting strings in proportion before an event is found too large (two suffice in practice).
_FIT_TRIES: Final = 8
#: Bytes the ``"truncated":true`` flag adds to an envelope.
_FLAG_ROOM: Final = len(b',"truncated":true')
#: The envelope after its cached head: timestamp, session, payload, id, depth, tail.
_ENVELOPE: Final = b'%s%s","session_id":%s,"payload":%s,"id":"%s%x","depth":%s%s'
#: Depths as they are written (formatting an int into bytes costs more than the lookup).
_DEPTH_BYTES: Final = {depth: b"%d" % depth for depth in range(64)}
#: How many distinct subjects the encoder remembers as already validated.
_SUBJECT_CACHE_SIZE: Final = 4096


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
        ``traceparent`` (a valid W3C value, from :func:`bus._runtime.tracing.current_traceparent`) is sent
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
        ref_room = 0 if ref is None else len(_dumps(ref_json(ref))) + len(b',"payload_ref":')
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
            envelope["payload_ref"] = ref_json(ref)
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


def payload_bytes(subject: str, payload: Mapping[str, Any]) -> bytes:
    """A payload's JSON bytes, as an envelope carries them and the object store keeps them whole."""
    return _dump_payload(subject, payload)
