"""Hypothesis fuzzing of every decoder that reads bytes from the bus: nothing crashes, every rejection says why."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus import EnvelopeError
from bus._core.depth import DEFAULT_MAX_DEPTH
from bus._core.encoder import Encoder
from bus._core.envelope import decode_event
from bus._core.errors import JournalError
from bus._journal.entries import JournalEntry, decode_entry

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
ENVELOPE_FIELDS = ["event", "timestamp", "session_id", "payload", "id", "depth", "source", "truncated"]
envelope_like = st.dictionaries(st.sampled_from(ENVELOPE_FIELDS) | st.text(max_size=6), json_values, max_size=9)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_envelope_decoder_on_random_bytes(data: bytes) -> None:
    try:
        event = decode_event("fuzz.subject", data)
    except EnvelopeError as exc:
        assert exc.subject == "fuzz.subject" and exc.reason
    else:
        assert isinstance(event.payload, dict) and event.depth >= 0


@settings(max_examples=150, deadline=None)
@given(envelope_like)
def test_envelope_decoder_on_envelope_shaped_objects(obj: dict[str, object]) -> None:
    try:
        event = decode_event("fuzz.subject", orjson.dumps(obj))
    except EnvelopeError as exc:
        assert exc.reason
    else:
        assert event.to_dict()["payload"] == obj["payload"]


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.text(max_size=10), json_values, max_size=6),
    st.one_of(st.none(), st.text(max_size=10)),
    st.integers(0, 20),
)
def test_everything_encoded_decodes_back(payload: dict[str, object], session: str | None, depth: int) -> None:
    data, _ = Encoder().encode("eva.custom.fuzz", payload, session, depth)
    if depth >= DEFAULT_MAX_DEPTH:  # no Bus emits it; a receiver refuses it
        with pytest.raises(EnvelopeError) as refused:
            decode_event("eva.custom.fuzz", data)
        assert refused.value.drop == "depth"
        return
    event = decode_event("eva.custom.fuzz", data)
    assert (event.payload, event.session_id, event.depth) == (payload, session, depth)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200) | envelope_like.map(orjson.dumps))
def test_journal_decoder_never_crashes(data: bytes) -> None:
    try:
        entry = decode_entry(data)
    except JournalError as exc:
        assert str(exc)
    else:
        assert isinstance(entry, JournalEntry)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(JournalEntry.__dataclass_fields__)), json_values)
def test_journal_decoder_on_one_bad_field(name: str, value: object) -> None:
    good = orjson.loads(JournalEntry(kind="trigger", point="p", phase="fire", who="t", decision="fired").encode())
    good[name] = value
    try:
        decode_entry(orjson.dumps(good))
    except JournalError as exc:
        assert str(exc)
