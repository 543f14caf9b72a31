"""The journal publisher on a real server: entries handed as builders are made when published, in order."""

from __future__ import annotations

import logging

import pytest

from bus import Bus
from bus._journal.entries import JournalEntry, JournalPublisher, decode_entry
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
