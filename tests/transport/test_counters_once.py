"""A process reports its counters once per interval, however many Buses it holds (bus/_counters.py)."""

from __future__ import annotations

import msgspec
import pytest

from bus import Bus, Event
from bus._counters import INTERVAL_ENV, CountersMsg, take_reports
from tests.support.waiting import wait_until

SUBJECT = "eva.custom.counted_once"


def _delivered(reports: list[bytes]) -> int:
    return sum(msgspec.json.decode(data, type=CountersMsg).delivered.get(SUBJECT, 0) for data in reports)


async def test_a_timer_finding_a_fresh_report_takes_nothing_and_moves_no_baseline(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0")  # no timers: this test alone takes reports
    take_reports()  # the baseline, now
    got: list[Event] = []
    async with Bus(nats_url) as first, Bus(nats_url) as second:
        await second.subscribe(SUBJECT, got.append)
        for _ in range(3):
            await first.emit(SUBJECT, {"n": 1})
        await wait_until(lambda: len(got) == 3, what="three deliveries")
        # The other Buses' timers, firing within the gap of the last report, add nothing ...
        assert take_reports(min_gap=3600) == []
        assert take_reports(min_gap=3600) == []
        # ... and what was counted meanwhile is still there for the next report, once.
        assert _delivered(take_reports()) == 3
        assert _delivered(take_reports()) == 0
