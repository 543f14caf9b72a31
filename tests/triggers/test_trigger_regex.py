"""Trigger ``matches`` filters run in linear time: a hostile payload cannot freeze the bus."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from bus import Bus, ConfigError, TurnRequest
from bus._journal.entries import JournalEntry, decode_entry
from tests.support.waiting import wait_until
from triggers.engine import _config as config
from triggers.engine.engine import TriggerEngine

#: Catastrophic for a backtracking engine on ``(a+)+$``: about 2**60 steps.
HOSTILE = "a" * 60 + "!"


def trigger(name: str, on: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "on": on, "prompt": "p", "agent": "eva", **fields}


def test_catastrophic_pattern_answers_at_once() -> None:
    """Run in a process of its own: a backtracking engine holds the GIL, so only a process can be bounded."""
    script = textwrap.dedent(
        f"""
        from bus._core.envelope import decode_event
        from bus._core.encoder import Encoder
        from triggers.engine import _config as config

        item = {{"name": "t", "on": "eva.x", "prompt": "p", "agent": "a",
                "filter": {{"payload.s": {{"matches": "(a+)+$"}}}}}}
        [condition] = config.parse({{"triggers": [item]}}, "f")["t"].conditions
        for text in ({HOSTILE!r}, "a" * 60):
            print(condition.holds(decode_event("eva.x", Encoder().encode("eva.x", {{"s": text}}, None, 0)[0])))
        """
    )
    # 2**60 steps for a backtracking engine: it would still be running when the bound is up
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [(r"(a)\1", "invalid escape sequence"), ("(?=a)b", "invalid perl operator"), ("(", "missing )")],
)
def test_patterns_re2_cannot_take_name_the_trigger_and_the_pattern(pattern: str, reason: str) -> None:
    item = trigger("backrefs", "eva.x", filter={"payload.s": {"matches": pattern}})
    with pytest.raises(ConfigError) as raised:
        config.parse({"triggers": [item]}, "triggers.yaml")
    message = str(raised.value)
    assert "trigger 'backrefs'" in message and "payload.s" in message
    assert repr(pattern) in message and reason in message and "RE2" in message


async def test_hostile_payload_does_not_hold_up_the_next_event(bus: Bus) -> None:
    """The hostile event is filtered out; a later event on another trigger still starts its turn."""
    requests: list[TurnRequest] = []

    async def agent(request: TurnRequest) -> str:
        requests.append(request)
        return "done"

    entries: list[JournalEntry] = []

    async def take(msg: Any) -> None:
        entries.append(decode_entry(msg.data))

    await bus.port.nc.subscribe("hookbus.journal.trigger", cb=take)
    await bus.serve_turns("eva", agent)
    specs = config.parse(
        {
            "triggers": [
                trigger("redos", "eva.custom.text", filter={"payload.s": {"matches": "(a+)+$"}}),
                trigger("after", "eva.custom.after"),
            ]
        },
        "triggers.yaml",
    )
    engine = await TriggerEngine(bus).start()
    try:
        await engine.apply(specs)
        await bus.flush()
        await bus.emit("eva.custom.text", {"s": HOSTILE})
        await bus.emit("eva.custom.after", {})
        await wait_until(lambda: len(requests) == 1, timeout=20, what="the turn of the event after the hostile one")
    finally:
        await engine.stop()
    assert requests[0].trigger == "after"
    await wait_until(lambda: any(e.who == "redos" for e in entries), what="the hostile event's journal entry")
    [hostile] = [e for e in entries if e.who == "redos"]
    assert hostile.decision == "suppressed" and (hostile.cause or "").startswith("filter")
