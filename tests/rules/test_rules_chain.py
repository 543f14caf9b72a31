"""A stage of many rules in one call: each counted and journaled in chain order, patches seen by later rules."""

from __future__ import annotations

from pathlib import Path

from bus import Bus, Cancel, MiddlewareOptions
from bus._middleware.kernel.metrics import MIDDLEWARE
from bus.testing import JournalRecorder
from tests.conftest import unique
from tests.support.waiting import wait_until

RULES = """rules:
  - name: a-quiet
    stage: {stage}
    if: 'payload.input.command == "rm"'
    then: cancel
  - name: b-shadow
    stage: {stage}
    if: 'true'
    then: cancel
    mode: shadow
  - name: c-redact
    stage: {stage}
    if: 'has(payload.input.token)'
    then: {{patch: {{remove: [input.token]}}}}
  - name: d-after
    stage: {stage}
    if: 'has(payload.input.token)'
    then: cancel
  - name: e-broken
    stage: {stage}
    if: 'payload.input.missing == 1'
    then: cancel
  - name: f-stop
    stage: {stage}
    if: 'payload.input.command == "ls"'
    then: cancel
    reason: 'no ls'
  - name: g-never
    stage: {stage}
    if: 'true'
    then: cancel
"""


async def test_every_rule_of_a_call_is_counted_and_journaled_in_order(nats_url: str, tmp_path: Path) -> None:
    stem = unique("chain")
    stage = f"{stem}.check"
    path = tmp_path / f"{stem}.yaml"
    path.write_text(RULES.format(stage=stage))
    options = MiddlewareOptions(journal_neutral=True)
    async with Bus(nats_url, rules=[path], middleware=options) as bus:
        await bus.middleware.start()
        journal = await JournalRecorder().attach(bus)
        payload = {"name": "shell", "input": {"command": "ls", "token": "t0p"}}
        decision = await bus.intercept(stage, payload, {"session": "s1"})
        assert isinstance(decision, Cancel) and decision.reason == "no ls" and decision.handler == f"{stem}.f-stop"
        await wait_until(lambda: any(entry.who == f"{stem}.f-stop" for entry in journal.entries), what="the stop")
    mine = [(entry.who.removeprefix(f"{stem}."), entry.decision) for entry in journal.entries if entry.point == stage]
    assert mine == [
        ("a-quiet", "continue"),
        ("b-shadow", "would_cancel"),
        ("c-redact", "patch"),
        ("d-after", "continue"),  # it saw the payload c-redact patched
        ("e-broken", "failed"),
        ("f-stop", "cancel"),
    ]
    for name, outcome, kind in [
        ("a-quiet", "ok", "continue"),
        ("b-shadow", "ok", "continue"),
        ("c-redact", "ok", "patch"),
        ("d-after", "ok", "continue"),
        ("e-broken", "failed", "continue"),
        ("f-stop", "ok", "cancel"),
    ]:
        who = f"{stem}.{name}"
        assert MIDDLEWARE.calls.get((who, stage, outcome)) == 1, name
        assert MIDDLEWARE.decisions.get((who, stage, kind)) == 1, name
        assert MIDDLEWARE.latency[(who, stage)].count == 1, name
    assert not any(key[0] == f"{stem}.g-never" for key in MIDDLEWARE.calls)
