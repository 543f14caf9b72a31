"""The envelope codec and subject rules, without a server (pure functions)."""

from __future__ import annotations

import re

import orjson
import pytest

from bus import EnvelopeError, NotSerializableError, PayloadTooLarge, SubjectError
from bus._core.clock import format_timestamp
from bus._core.encoder import Encoder
from bus._core.envelope import decode_event
from bus._core.subjects import event_name, matches, normalise_pattern, subject_for, validate_pattern, validate_subject

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_round_trip_keeps_every_field() -> None:
    enc = Encoder(source="agent-7")
    data, truncated = enc.encode("eva.turn.completed", {"answer": "hi", "n": [1, 2.5, None]}, "s9", 3)
    assert not truncated
    event = decode_event("eva.turn.completed", data)
    assert (event.event, event.session_id, event.depth, event.source) == ("turn.completed", "s9", 3, "agent-7")
    assert event.payload == {"answer": "hi", "n": [1, 2.5, None]}
    assert STAMP.match(event.timestamp)
    assert orjson.loads(data) == event.to_dict()


def test_ids_are_unique() -> None:
    enc, other = Encoder(), Encoder()
    ids = {decode_event("a.b", enc.encode("a.b", {}, None, 0)[0]).id for _ in range(1000)}
    ids |= {decode_event("a.b", other.encode("a.b", {}, None, 0)[0]).id for _ in range(1000)}
    assert len(ids) == 2000


def test_timestamp_format() -> None:
    assert format_timestamp(1774080930123) == "2026-03-21T08:15:30.123Z"
    assert format_timestamp(5) == "1970-01-01T00:00:00.005Z"


@pytest.mark.parametrize(
    ("subject", "name"),
    [
        ("prx.lifecycle.tool_call", "tool_call"),
        ("eva.turn.completed", "turn.completed"),
        ("eva.custom.deploy", "custom.deploy"),
        ("acme.build.done", "build.done"),
        ("solo", "solo"),
    ],
)
def test_event_name_drops_the_domain(subject: str, name: str) -> None:
    assert event_name(subject) == name


@pytest.mark.parametrize(
    ("subject", "reason"),
    [
        ("", "empty subject"),
        ("a..b", "empty token"),
        ("a.b.", "empty token"),
        ("a.*", "wildcard"),
        ("a.>", "wildcard"),
        ("a.b c", "characters outside"),
        ("a.b\r\nPUB", "characters outside"),
        ("a.é", "characters outside"),
        (None, "must be a string"),
    ],
)
def test_invalid_subjects_name_the_reason(subject: object, reason: str) -> None:
    with pytest.raises(SubjectError, match=reason):
        validate_subject(subject)


def test_valid_subjects() -> None:
    for subject in ("prx.lifecycle.tool_call", "eva.custom.my-hook_2", "x"):
        assert validate_subject(subject) == subject


@pytest.mark.parametrize(
    ("pattern", "nats"),
    [
        ("*", ">"),
        (">", ">"),
        ("tool_call", "prx.lifecycle.tool_call"),
        ("prx.*", "prx.>"),
        ("eva.*", "eva.>"),
        ("prx.lifecycle.*", "prx.lifecycle.*"),
        ("eva.custom.>", "eva.custom.>"),
        ("eva.*.completed", "eva.*.completed"),
        ("deploy", "deploy"),
    ],
)
def test_pattern_mapping(pattern: str, nats: str) -> None:
    assert normalise_pattern(pattern) == nats


@pytest.mark.parametrize("pattern", ["a.>.b", "a..b", "", "a.b c", "a.x>"])
def test_invalid_patterns(pattern: str) -> None:
    with pytest.raises(SubjectError):
        validate_pattern(pattern)


def test_matches() -> None:
    assert matches("prx.lifecycle.*", "prx.lifecycle.error")
    assert not matches("prx.lifecycle.*", "prx.lifecycle.error.x")
    assert matches("eva.>", "eva.custom.x")
    assert not matches("eva.>", "eva")
    assert subject_for("error") == "prx.lifecycle.error"


def test_oversized_event_is_truncated_and_flagged() -> None:
    enc = Encoder(max_bytes=64 * 1024)
    big = "A" * 50_000 + "MIDDLE" + "Z" * 50_000
    data, truncated = enc.encode("prx.lifecycle.tool_call", {"tool": "shell", "output": big, "small": "keep"}, None, 0)
    assert truncated
    assert len(data) <= 64 * 1024
    event = decode_event("prx.lifecycle.tool_call", data)
    assert event.truncated
    out = event.payload["output"]
    assert out.startswith("AAAA") and out.endswith("ZZZZ")
    cut = int(re.search(r"\[hookbus: (\d+) bytes cut\]", out).group(1))  # type: ignore[union-attr]
    assert len(out.encode()) - len(re.search(r"…\[hookbus: \d+ bytes cut\]…", out).group(0).encode()) + cut == len(big)  # type: ignore[union-attr]
    assert event.payload["small"] == "keep"


def test_limit_is_configurable() -> None:
    enc = Encoder(max_bytes=1024)
    data, truncated = enc.encode("a.b", {"text": "x" * 2000}, None, 0)
    assert truncated and len(data) <= 1024


def test_too_large_even_after_truncation() -> None:
    enc = Encoder(max_bytes=1024)
    many_small = {f"k{i}": i for i in range(500)}
    with pytest.raises(PayloadTooLarge, match="over the 1024-byte limit") as info:
        enc.encode("eva.custom.big", many_small, None, 0)
    assert info.value.subject == "eva.custom.big"
    assert info.value.limit == 1024


def test_caller_payload_is_not_mutated_by_truncation() -> None:
    payload = {"text": "y" * 100_000}
    Encoder().encode("a.b", payload, None, 0)
    assert payload["text"] == "y" * 100_000


def test_not_serialisable_names_the_subject() -> None:
    with pytest.raises(NotSerializableError, match=r"'a\.b'.*not JSON-serialisable"):
        Encoder().encode("a.b", {"x": {1, 2}}, None, 0)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"nope", "not JSON"),
        (b"[]", "expected a JSON object, got list"),
        (
            b'{"event":"e","timestamp":"t","session_id":null,"payload":{},"id":"i","depth":null}',
            "'depth' has type NoneType",
        ),
        (b'{"event":"e","timestamp":"t","payload":{},"id":"i","depth":0}', "missing field 'session_id'"),
        (b'{"event":"e","timestamp":5,"session_id":null,"payload":{},"id":"i","depth":0}', "'timestamp' has type int"),
        (b'{"event":"e","timestamp":"t","session_id":1,"payload":{},"id":"i","depth":0}', "'session_id' has type int"),
        (
            b'{"event":"e","timestamp":"t","session_id":null,"payload":{},"id":"i","depth":1.5}',
            "'depth' has type float",
        ),
        (b'{"event":"e","timestamp":"t","session_id":null,"payload":{},"id":"i","depth":-2}', "negative"),
        (b'{"event":"e","timestamp":"t","session_id":null,"payload":{},"id":"i","depth":0,"source":3}', "'source'"),
    ],
)
def test_decode_names_what_is_wrong(raw: bytes, reason: str) -> None:
    with pytest.raises(EnvelopeError, match=re.escape(reason)):
        decode_event("x.e", raw)  # the envelope's event "e" is the subject's


def test_each_event_carries_its_own_session_when_sessions_alternate() -> None:
    """The encoder keeps the last session's bytes: a different session (equal text or not) is encoded afresh."""
    enc = Encoder()
    sessions = ["s-1", "s-2", "s-1", None, "s-1", "".join(["s-", "2"]), 's-"3"']
    got = [decode_event("x.e", enc.encode("x.e", {}, session, 0)[0]).session_id for session in sessions]
    assert got == sessions
