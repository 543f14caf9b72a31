"""A stage of many rules in one call: each counted and journaled in chain order, patches seen by later rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus import Bus, Cancel, Continue, MiddlewareOptions
from bus._middleware.kernel.metrics import MIDDLEWARE
from bus._middleware.rules.compile import activation, compile_file, env
from bus._middleware.rules.files import parse
from bus._middleware.rules.runs import RuleRun, _of_rules, evaluate
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


QUIET = """rules:
{rules}
  - name: z-int
    stage: {stage}
    if: 'size(payload.input)'
    then: cancel
  - name: zz-closed
    stage: {stage}
    if: 'payload.input.gone == 1'
    then: cancel
    fail_closed: true
"""


async def test_a_run_of_quiet_rules_evaluated_together_counts_and_faults_as_each_alone(
    nats_url: str, tmp_path: Path
) -> None:
    stem = unique("quiet")
    stage = f"{stem}.check"
    rules = "\n".join(
        f"  - name: q{i:02d}\n    stage: {stage}\n    if: 'payload.input.command == \"rm{i}\"'\n    then: cancel"
        for i in range(20)
    )
    path = tmp_path / f"{stem}.yaml"
    quiet_only = tmp_path / f"{stem}q.yaml"
    path.write_text(QUIET.format(rules=rules, stage=stage))
    quiet_only.write_text(f"rules:\n{rules.replace(stage, stage + 'q')}\n")
    options = MiddlewareOptions(journal_neutral=True)
    async with Bus(nats_url, rules=[path, quiet_only], middleware=options) as bus:
        await bus.middleware.start()
        journal = await JournalRecorder().attach(bus)
        for _ in range(3):  # 20 quiet rules, all false: one evaluation, each counted
            assert await bus.intercept(f"{stage}q", {"input": {"command": "ls"}}) == Continue()
        hit = await bus.intercept(f"{stage}q", {"input": {"command": "rm7"}})
        assert hit == Cancel("cancelled by a rule", f"{stem}q.q07")
        # z-int gives an int, zz-closed cannot be evaluated: the run is evaluated rule by rule, each reads so
        closed = await bus.intercept(stage, {"input": {"command": "ls"}})
        assert isinstance(closed, Cancel) and closed.handler == f"{stem}.zz-closed", closed
        await wait_until(lambda: any(e.who == f"{stem}.zz-closed" for e in journal.entries), what="the fault")
        await wait_until(lambda: sum(e.point == f"{stage}q" for e in journal.entries) >= 20 * 3 + 8, what="quiet")
    quiet = [e.who for e in journal.entries if e.point == f"{stage}q" and e.decision == "continue"][:20]
    assert quiet == [f"{stem}q.q{index:02d}" for index in range(20)]  # journaled in chain order
    for index in range(20):
        who = f"{stem}q.q{index:02d}"
        calls = 4 if index <= 7 else 3  # the fourth call stopped at q07
        assert MIDDLEWARE.calls.get((who, f"{stage}q", "ok")) == calls, who
        assert MIDDLEWARE.latency[(who, f"{stage}q")].count == calls, who
        assert MIDDLEWARE.decisions.get((who, f"{stage}q", "continue")) == (calls if index != 7 else 3), who
    assert MIDDLEWARE.decisions.get((f"{stem}q.q07", f"{stage}q", "cancel")) == 1
    assert MIDDLEWARE.calls.get((f"{stem}.z-int", stage, "failed")) == 1
    assert MIDDLEWARE.calls.get((f"{stem}.zz-closed", stage, "failed")) == 1
    assert MIDDLEWARE.calls.get((f"{stem}.q00", stage, "ok")) == 1
    mine = [(e.who.removeprefix(f"{stem}."), e.decision) for e in journal.entries if e.point == stage]
    assert mine[-2:] == [("z-int", "failed"), ("zz-closed", "failed")]


def test_a_run_asks_whether_any_condition_holds_and_falls_back_for_a_non_bool_condition() -> None:
    def run_of(*conditions: str) -> RuleRun:
        body = "".join(
            f"  - name: r{i}\n    stage: s\n    if: '{c}'\n    then: cancel\n" for i, c in enumerate(conditions)
        )
        run = _of_rules(compile_file(parse(f"rules:\n{body}", "runs.yaml", unique("runs"))))
        assert run is not None
        return run

    joined = run_of('payload.name == "rm"', 'payload.name == "mv"')
    act = activation({"name": "ls"}, {}, None)
    assert evaluate(joined, act) is True  # every condition false
    assert evaluate(joined, activation({"name": "mv"}, {}, None)) == [False, True]
    assert evaluate(joined, activation({}, {}, None)) is None  # cannot be evaluated: each rule alone
    with pytest.raises(RuntimeError):  # an int condition: the checker will not join it with ||
        env().compile('(payload.name == "rm") || (size(payload))')
    typed = run_of('payload.name == "rm"', "size(payload)")  # so the run keeps the comprehension
    assert evaluate(typed, act) == [False, 1]  # some condition is not false: each rule decides on its value
    assert evaluate(run_of('payload.name == "rm"', "payload.size == 1"), act) is None


def test_a_rule_reads_each_name_its_condition_or_reason_mentions() -> None:
    """What a rule may read is every one of payload, ctx and bag its texts mention, anywhere: a string literal
    or a root-scoped ``.ctx`` counts (a name left out of the call's activation would read as missing)."""

    def reads(condition: str, reason: str = "no") -> frozenset[str]:
        body = f"  - name: r\n    stage: s\n    if: '{condition}'\n    then: cancel\n    reason: '{reason}'\n"
        (rule,) = compile_file(parse(f"rules:\n{body}", "reads.yaml", unique("reads")))
        return rule.reads

    assert reads('payload.name == "rm"') == {"payload"}
    assert reads('payload.name == "rm"', "not for {{ ctx.agent }}") == {"payload", "ctx"}
    assert reads('.ctx.agent == "eva"') == {"ctx"}
    assert reads('"bag" == "ctx"') == {"bag", "ctx"}
    assert reads("true") == frozenset()


async def test_a_chain_of_rules_reading_different_names_sees_each_of_them(nats_url: str, tmp_path: Path) -> None:
    """The call's activation holds what the chain's rules read, together: a rule reading only the payload, one
    reading ctx only in its reason, one reading nothing, each decides as alone."""
    stem = unique("names")
    stage = f"{stem}.check"
    path = tmp_path / f"{stem}.yaml"
    path.write_text(
        f"rules:\n  - name: a-nothing\n    stage: {stage}\n    if: 'false'\n    then: cancel\n"
        f"  - name: b-payload\n    stage: {stage}\n    if: 'payload.name == \"mv\"'\n    then: cancel\n"
        f"  - name: c-reason\n    stage: {stage}\n    if: 'payload.name == \"rm\"'\n    then: cancel\n"
        f"    reason: 'not for {{{{ ctx.agent }}}} on {{{{ ctx.stage }}}}'\n"
    )
    async with Bus(nats_url, rules=[path]) as bus:
        await bus.middleware.start()
        assert await bus.intercept(stage, {"name": "ls"}, {"agent": "eva"}) == Continue()
        moved = await bus.intercept(stage, {"name": "mv"}, {"agent": "eva"})
        assert isinstance(moved, Cancel) and moved.handler == f"{stem}.b-payload"
        removed = await bus.intercept(stage, {"name": "rm"}, {"agent": "eva"})
        assert isinstance(removed, Cancel) and removed.reason == f"not for eva on {stage}"
