"""The envelope has one description, ``EnvelopeMsg``: the fast receive check, ``EventDict``, ``Event`` and the
encoder are held to it field by field, and on envelopes generated from its own type information."""

from __future__ import annotations

import dataclasses
from typing import Any, NotRequired, get_origin, get_type_hints

import msgspec
import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bus._core import envelope
from bus._core.depth import DEFAULT_MAX_DEPTH
from bus._core.encoder import Encoder
from bus._core.envelope import Event, EventDict
from bus._core.envelope_schema import EnvelopeMsg, PayloadRefMsg
from bus._core.errors import EnvelopeError
from bus._core.schema import decode
from bus._core.traceparent import valid_traceparent

TYPE = msgspec.inspect.type_info(EnvelopeMsg)
assert isinstance(TYPE, msgspec.inspect.StructType)
FIELDS = {f.name: f for f in TYPE.fields}
SUBJECT = "prx.lifecycle.tool_call"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _python_types(kind: msgspec.inspect.Type) -> set[type]:
    """The Python types a msgspec type accepts, for the plain ones the fast check tests with ``isinstance``."""
    plain: dict[type[msgspec.inspect.Type], type] = {
        msgspec.inspect.StrType: str,
        msgspec.inspect.IntType: int,
        msgspec.inspect.DictType: dict,
        msgspec.inspect.NoneType: type(None),
    }
    if isinstance(kind, msgspec.inspect.UnionType):
        return set().union(*(_python_types(member) for member in kind.types))
    return {plain[type(kind)]}


def test_the_fast_check_tests_each_field_as_envelope_msg_declares_it() -> None:
    for name, kinds in envelope._FIELDS:
        assert set(kinds if isinstance(kinds, tuple) else (kinds,)) == _python_types(FIELDS[name].type), name
    checked = {name for name, _ in envelope._FIELDS}
    required = {name for name, f in FIELDS.items() if f.required}
    assert checked == required | envelope._FILLED_IN
    assert {name for name in checked if not FIELDS[name].required} == envelope._FILLED_IN


def test_event_dict_and_event_name_exactly_the_fields_of_envelope_msg() -> None:
    hints = get_type_hints(EventDict, include_extras=True)  # (the module's annotations are strings)
    assert set(hints) == set(FIELDS)
    # What a receiver hands on always has the fields the fast check requires (it fills in id and depth).
    assert {name for name, hint in hints.items() if get_origin(hint) is not NotRequired} == {
        name for name, _ in envelope._FIELDS
    }
    assert set(FIELDS) <= {f.name for f in dataclasses.fields(Event)}


_text = st.text(st.characters(codec="utf-8"), max_size=6)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**63) | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_text, inner, max_size=2),
    max_leaves=6,
)
_ref = st.builds(
    dict,
    bucket=st.just("hookbus_payloads") | _text,
    name=st.just("a" * 64) | _text,
    size=st.integers(-1, 10),
    sha256=st.just("b" * 64) | _text,
)
#: Values close to valid for each field's declared type (what the fields take when well formed), plus garbage.
_NEAR: dict[str, st.SearchStrategy[Any]] = {
    "event": st.sampled_from(["tool_call", "agent_end"]),
    "depth": st.integers(-1, DEFAULT_MAX_DEPTH + 1),
    "payload": st.dictionaries(_text, _json, max_size=2),
    "truncated": st.booleans(),
    "received_as": st.sampled_from(["prx-envelope", "prx-payload"]),
    "payload_ref": st.none() | _ref,
    "traceparent": st.just(TRACEPARENT) | _text,
}


def _near(name: str, kind: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    if name in _NEAR:
        return _NEAR[name]
    return st.one_of(*(st.none() if t is type(None) else st.from_type(t) for t in _python_types(kind)))


_ENVELOPES = (
    st.fixed_dictionaries(
        {name: _near(name, f.type) | _json for name, f in FIELDS.items() if f.required},
        optional={name: _near(name, f.type) | _json for name, f in FIELDS.items() if not f.required},
    )
    | st.fixed_dictionaries({}, optional={name: _near(name, f.type) | _json for name, f in FIELDS.items()})
    | _json
)
_VALID = {"event": "tool_call", "timestamp": "t", "session_id": None, "payload": {}, "id": "e", "depth": 0}


def _agree(obj: dict[str, Any], event: Event, msg: EnvelopeMsg) -> None:
    """Every field of the decoded event is what EnvelopeMsg read (a new field needs a line here)."""
    completed = msg.id is msgspec.UNSET or "depth" not in obj
    same: dict[str, Any] = {
        "event": msg.event,
        "timestamp": msg.timestamp,
        "session_id": msg.session_id,
        "payload": msg.payload,
        "id": event.id if msg.id is msgspec.UNSET else msg.id,  # absent: assigned on receipt
        "depth": msg.depth,
        "source": msg.source,
        "truncated": msg.truncated is True,
        "received_as": "prx-envelope" if completed else None,  # the receiver's, never the sender's
        "payload_ref": msg.payload_ref,
        "traceparent": valid_traceparent(msg.traceparent),
    }
    assert set(same) == set(FIELDS)
    assert {name: getattr(event, name) for name in FIELDS} == same


@settings(max_examples=400, deadline=None)
@given(_ENVELOPES)
@example({**_VALID, "payload_ref": {"bucket": "hookbus_payloads", "name": "n", "size": 1, "sha256": "b" * 64}})
@example({**_VALID, "payload_ref": "nope"})
@example({key: value for key, value in {**_VALID, "payload_ref": "nope"}.items() if key != "id"})
@example({**_VALID, "traceparent": TRACEPARENT, "received_as": "prx-payload"})
@example({**_VALID, "depth": DEFAULT_MAX_DEPTH})
@example({**_VALID, "event": "agent_end"})
def test_the_fast_check_and_envelope_msg_agree_on_every_field(obj: Any) -> None:
    data = orjson.dumps(obj)
    try:
        event: Event | None = envelope.decode_event(SUBJECT, data)
    except EnvelopeError:
        event = None
    if isinstance(obj, dict) and "event" not in obj and "payload" not in obj:  # a bare PRX payload: wrapped
        assert event is not None and event.received_as == "prx-payload"
        return
    try:
        msg = decode(data, EnvelopeMsg, "event", ValueError)
    except ValueError:
        assert event is None
        return
    assert (event is not None) == (msg.event == "tool_call" and msg.depth < DEFAULT_MAX_DEPTH)
    if event is not None:
        _agree(obj, event, msg)


@settings(max_examples=150, deadline=None)
@given(
    payload=st.dictionaries(_text, _json, max_size=3),
    session=st.none() | _text,
    depth=st.integers(0, DEFAULT_MAX_DEPTH - 1),
    traceparent=st.none() | st.just(TRACEPARENT),
)
def test_what_the_encoder_writes_is_an_envelope_msg(
    payload: dict[str, Any], session: str | None, depth: int, traceparent: str | None
) -> None:
    data, oversize = Encoder(source="probe").encode(SUBJECT, payload, session, depth, traceparent)
    assert not oversize
    msg = decode(data, EnvelopeMsg, "event", ValueError)
    assert set(orjson.loads(data)) <= set(FIELDS)
    _agree(orjson.loads(data), envelope.decode_event(SUBJECT, data), msg)
    assert (msg.payload, msg.session_id, msg.depth, msg.source, msg.traceparent) == (
        payload,
        session,
        depth,
        "probe",
        traceparent,
    )


def test_a_claim_reference_is_read_as_its_declared_type() -> None:
    ref = {"bucket": "hookbus_payloads", "name": "n", "size": 1, "sha256": "b" * 64}
    event = envelope.decode_event(SUBJECT, orjson.dumps({**_VALID, "payload_ref": ref}))
    assert event.payload_ref == PayloadRefMsg(**ref)
