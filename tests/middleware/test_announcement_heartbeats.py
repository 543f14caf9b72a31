"""A heartbeat (the same announcement with a new trailing ``at``) is taken from the checked one; anything else is
checked in full (bus/_middleware/registry.py: every kernel gets every module's heartbeats)."""

from __future__ import annotations

import msgspec
import pytest

from bus import Continue, Module
from bus._core.errors import ForeignAnnouncement
from bus._middleware.registry import announcement_of, parse_announcement


def _announcement(name: str) -> bytes:
    module = Module(name)

    @module.stage("tool.call")
    async def allow(stage: str, payload: dict[str, object]) -> Continue:
        return Continue()

    return announcement_of(module).to_bytes()


def _with_at(data: bytes, tail: bytes) -> bytes:
    return data[: data.rindex(b',"at":')] + b',"at":' + tail


def test_a_heartbeat_gives_the_checked_announcement_with_its_new_time() -> None:
    data = _announcement("beat_a")
    key = "beat_a." + msgspec.json.decode(data)["instance"]
    first = parse_announcement(data, key)
    beat = parse_announcement(_with_at(data, b"1796000000.25}"), key)
    assert beat == first  # a heartbeat is no change
    assert beat.at == 1796000000.25
    assert beat.declarations is first.declarations


@pytest.mark.parametrize(
    "tail",
    [
        b'1,"module":"beat_b"}',  # a field after the time: not a plain heartbeat
        b"1e999}",  # not a finite time
        b'"soon"}',  # not a number
    ],
)
def test_what_is_not_a_plain_new_time_is_checked_in_full(tail: bytes) -> None:
    data = _announcement("beat_b")
    key = "beat_b." + msgspec.json.decode(data)["instance"]
    parse_announcement(data, key)
    tampered = _with_at(data, tail)
    try:
        full = parse_announcement(tampered, None)  # no key: never cached under ``key``
    except (ValueError, KeyError, TypeError) as exc:
        with pytest.raises(type(exc)):
            parse_announcement(tampered, key)
    else:
        assert parse_announcement(tampered, key) == full


def test_the_same_bytes_under_another_key_are_checked_again() -> None:
    data = _announcement("beat_c")
    key = "beat_c." + msgspec.json.decode(data)["instance"]
    parse_announcement(data, key)
    with pytest.raises(ForeignAnnouncement):
        parse_announcement(_with_at(data, b"5}"), "beat_d.x")  # another module's key: refused as always
