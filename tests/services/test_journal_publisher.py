"""The journal publisher on a real server: entries handed as builders are made when published, in order."""

from __future__ import annotations

import dataclasses
import logging

import orjson
import pytest

from bus import Bus
from bus._journal.entries import JournalEntry, JournalPublisher, decode_entry, entry_json
from bus._transport.port import RawMessage
from tests.support.waiting import wait_until


def _entry(who: str) -> JournalEntry:
    return JournalEntry(kind="middleware", point="tool.call", phase="request", who=who, decision="patch")


async def test_builders_are_called_when_published_and_keep_the_order(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    got: list[JournalEntry] = []

    async def on_entry(msg: RawMessage) -> None:
        got.append(decode_entry(msg.data, msg.subject))

    await bus.port.subscribe_raw("hookbus.journal.middleware.>", on_entry)
    await bus.port.subscribe_raw("hookbus.journal.middleware", on_entry)
    await bus.flush()
    publisher = JournalPublisher(bus.port, window=60.0)  # only an explicit flush publishes
    built: list[str] = []

    def later() -> list[JournalEntry]:
        built.append("later")
        return [_entry("b.later1"), _entry("b.later2")]

    def broken() -> list[JournalEntry]:
        raise ValueError("no entry today")

    publisher.add([_entry("a.first")])
    publisher.add_later(later)
    publisher.add_later(broken)
    publisher.add([_entry("c.last")])
    assert built == [] and publisher.pending == 4  # nothing is built before it is published
    with caplog.at_level(logging.WARNING, logger="hookbus.journal"):
        publisher.flush()
    assert built == ["later"] and publisher.pending == 0
    assert "no entry today" in caplog.text  # a failing builder is logged; the others still go out
    await wait_until(lambda: len(got) >= 4, what="four journal entries")
    assert [entry.who for entry in got] == ["a.first", "b.later1", "b.later2", "c.last"]
    await publisher.drain()


async def test_encoded_builders_keep_their_place_among_entries_on_their_kinds_subject(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    got: list[tuple[str, JournalEntry]] = []

    async def on_entry(msg: RawMessage) -> None:
        got.append((msg.subject, decode_entry(msg.data, msg.subject)))

    await bus.port.subscribe_raw("hookbus.journal.>", on_entry)
    await bus.flush()
    publisher = JournalPublisher(bus.port, window=60.0)

    def encoded() -> list[bytes]:
        return [_entry("b.encoded1").encode(), _entry("b.encoded2").encode()]

    def broken() -> list[bytes]:
        raise ValueError("no bytes today")

    publisher.add([_entry("a.first")])
    publisher.add_encoded_later("middleware", encoded)
    publisher.add_encoded_later("middleware", broken)
    publisher.add([_entry("c.last")])
    with caplog.at_level(logging.WARNING, logger="hookbus.journal"):
        publisher.flush()
    assert "no bytes today" in caplog.text
    await wait_until(lambda: len(got) >= 4, what="four journal entries")
    assert [entry.who for _, entry in got] == ["a.first", "b.encoded1", "b.encoded2", "c.last"]
    assert len({subject for subject, _ in got}) == 1  # the encoded ones on the kind's subject, as the others
    await publisher.drain()


def test_entry_json_writes_what_the_entry_encodes() -> None:
    """The kernel's entries are written without the dataclass: the same fields, in the same order, same values."""
    entry = JournalEntry(
        kind="middleware",
        point="tool.call",
        phase="request",
        who="m.h",
        decision="patch",
        cause="why",
        duration_ms=1.5,
        session="s-1",
        agent="a-1",
        depth=2,
        trace_id="t-1",
        identity="i" * 16,
        process="host:1",
        time="2026-12-03T08:28:32.051Z",
        version="3",
        rule="name == 'x'",
        payload_sha256="0" * 64,
        changed="~input",
        fail_mode="open",
        kernel="host:2",
    )
    written = entry_json(
        *(getattr(entry, name) for name in ("kind", "point", "phase", "who", "decision", "cause", "duration_ms")),
        *(getattr(entry, name) for name in ("session", "agent", "depth", "trace_id", "identity", "process", "time")),
        *(getattr(entry, name) for name in ("version", "rule", "payload_sha256", "changed", "fail_mode", "kernel")),
    )
    ours, theirs = orjson.loads(written), orjson.loads(entry.encode())
    assert list(ours) == [field.name for field in dataclasses.fields(JournalEntry)] == list(theirs)
    assert ours["id"] != theirs["id"] and {**ours, "id": theirs["id"]} == theirs
    assert decode_entry(written).who == "m.h"
