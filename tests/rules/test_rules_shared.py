"""A run's shared reads bound once (bus._middleware.rules.shared): every condition's value is what it is alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bus import Bus, Cancel, Continue, MiddlewareOptions
from bus._middleware.rules.compile import Rule, activation, compile_file
from bus._middleware.rules.files import parse
from bus._middleware.rules.runs import _of_rules, evaluate
from bus._middleware.rules.shared import bind, shared
from bus.testing import JournalRecorder
from tests.conftest import unique
from tests.support.waiting import wait_until


def test_a_path_two_conditions_read_is_bound_and_literals_comments_and_has_are_left_alone() -> None:
    bound, out = shared(
        [
            'payload.input.command.contains("rm")',
            'has(payload.input.command) && payload.input.command == "ls"',
            '"payload.input.command" == payload.input.command // payload.input.command',
            "bag.input.command == 'ls' && ctx.agent == 'eva'",
            'payload.items.exists(payload, payload.input.command == "x")',  # the name payload is shadowed
            'payload.input.command.size() > 3 && payload.size() > 1 && ctx.agent != ""',
        ]
    )
    assert bound == ["payload.input.command", "ctx.agent"]
    assert out == [
        '__hb0.contains("rm")',
        'has(payload.input.command) && __hb0 == "ls"',
        '"payload.input.command" == __hb0 // payload.input.command',
        "bag.input.command == 'ls' && __hb1 == 'eva'",  # bag's path is not the payload's
        'payload.items.exists(payload, payload.input.command == "x")',
        '__hb0.size() > 3 && payload.size() > 1 && __hb1 != ""',
    ]
    assert bind(bound, "true") == "cel.bind(__hb0, payload.input.command, cel.bind(__hb1, ctx.agent, true))"
    assert shared(['payload.name == "a"', 'ctx.agent == "b"']) == ([], ['payload.name == "a"', 'ctx.agent == "b"'])
    raw = [f'{prefix}"\\" == payload.name || "a" == payload.name' for prefix in ("r", "R", "rb", "Br")]
    assert shared([*raw, 'payload.name == "b"']) == ([], [*raw, 'payload.name == "b"'])  # not read surely
    assert shared(['b"\\"" == payload.name', 'payload.name == "b"'])[0] == ["payload.name"]


CONDITIONS = [
    'payload.input.command.contains("rm")',
    'payload.input.command == "ls"',
    'has(payload.input.command) && payload.input.command.startsWith("git")',
    "payload.input.command.size() > 40",
    'bag.input.command == "ls"',
    'ctx.agent == "eva" && payload.input.command != ""',
    'ctx.agent.startsWith("bo")',
    "payload.input.count > 3",
    "payload.input.count == 7 || payload.input.command == 'mv' // payload.input.count",
    "payload.input.tags.exists(tag, tag == payload.input.command)",
    "has(payload.input.tags) && size(payload.input.tags) > 2",
    '"payload.input.command" in payload.input',
]
PAYLOADS: list[dict[str, Any]] = [
    {"input": {"command": "ls", "count": 1, "tags": []}},
    {"input": {"command": "cat", "count": 1, "tags": []}},
    {"input": {"command": "rm -rf /", "count": 9, "tags": ["a", "b", "c"]}},
    {"input": {"command": "git push", "count": 7, "tags": ["git push"]}},
    {"input": {"command": "mv", "count": 0, "tags": ["x"]}},
    {"input": {"command": 5, "count": "many", "tags": "no"}},
    {"input": {"count": 2}},
    {"input": "flat"},
    {"name": "none"},
    {"input": {"command": "x" * 50, "count": 3, "tags": [], "payload.input.command": 1}},
]
CTXS = [{"agent": "eva"}, {"agent": "bob"}, {"agent": "ann"}, {}]
BAGS: list[dict[str, Any] | None] = [None, {"input": {"command": "ls"}}, {"input": {"command": "cd"}}, {"input": 1}]


def _alone(rule: Rule, act: Any) -> Any:
    result = rule.condition.eval(act)
    return "error" if result.type().name() == "ERROR" else result.value()


def test_a_run_with_bound_reads_gives_what_each_condition_gives_alone_on_every_call() -> None:
    """Each condition alone is the reference: the run says all false exactly when each alone is false, and
    otherwise each one's value, or it cannot be evaluated together when one of them fails (each rule alone then)."""
    body = "".join(
        f"  - name: r{i}\n    stage: s\n    if: >-\n      {c}\n    then: cancel\n" for i, c in enumerate(CONDITIONS)
    )
    rules = compile_file(parse(f"rules:\n{body}", "shared.yaml", unique("shared")))
    assert len(shared([rule.source for rule in rules])[0]) >= 3  # the run does bind reads
    run = _of_rules(rules)
    assert run is not None
    seen = set()
    for payload in PAYLOADS:
        for ctx in CTXS:
            for bag in BAGS:
                act = activation(payload, ctx, bag)
                alone = [_alone(rule, act) for rule in rules]
                together = evaluate(run, act)
                if all(value is False for value in alone):
                    assert together is True, (payload, ctx, bag)
                elif "error" in alone:
                    assert together is None, (payload, ctx, bag, alone)
                else:
                    assert together == alone, (payload, ctx, bag)
                seen.add(type(together).__name__)
    assert seen == {"bool", "list", "NoneType"}  # every branch was taken


def _rule(name: str, stage: str, condition: str, extra: str = "") -> str:
    return f"  - name: {name}\n    stage: {stage}\n    if: '{condition}'\n    then: cancel\n{extra}"


async def test_among_100_rules_one_failing_fails_only_itself_and_order_is_the_chains(
    nats_url: str, tmp_path: Path
) -> None:
    """100 rules reading one bound path, on two stages; on the first, beside them: a fail-closed rule that cannot
    be evaluated (between q50 and q51 by name), a fail-open one, and one reading the bag's path of the same name
    (the bag is empty: it fails, where the payload's path would hold); on both, two rules that hold on ``mv``,
    where the higher priority decides."""
    stem = unique("shared")
    stage, clean = f"{stem}.check", f"{stem}.clean"
    both = f"[{stage}, {clean}]"
    quiet = "".join(_rule(f"q{i:02d}", both, f'payload.input.command == "rm{i}"') for i in range(100))
    extra = (
        _rule(
            "q50-closed", stage, 'payload.input.command == "boom" || payload.input.gone == 1', "    fail_closed: true\n"
        )
        + _rule("a-open", stage, "payload.input.missing == payload.input.command")
        + _rule("b-bag", stage, 'bag.input.command == "ls"')
        + _rule("p-low", both, 'payload.input.command == "mv"', "    priority: 1\n    reason: low\n")
        + _rule("p-high", both, 'payload.input.command == "mv"', "    priority: 5\n    reason: high\n")
    )
    path = tmp_path / f"{stem}.yaml"
    path.write_text(f"rules:\n{quiet}{extra}")
    async with Bus(nats_url, rules=[path], middleware=MiddlewareOptions(journal_neutral=True)) as bus:
        await bus.middleware.start()
        journal = await JournalRecorder().attach(bus)
        for point in (stage, clean):
            hit = await bus.intercept(point, {"input": {"command": "rm20", "gone": 0}})
            assert hit == Cancel("cancelled by a rule", f"{stem}.q20")
            assert await bus.intercept(point, {"input": {"command": "ls", "gone": 0}}) == Continue()
            assert await bus.intercept(point, {"input": {"command": "mv", "gone": 0}}) == Cancel(
                "high", f"{stem}.p-high"
            )
        closed = await bus.intercept(stage, {"input": {"command": "rm70"}})  # q50-closed fails before q70
        assert isinstance(closed, Cancel) and closed.handler == f"{stem}.q50-closed", closed
        assert await bus.intercept(clean, {"input": {"command": "rm70"}}) == Cancel(
            "cancelled by a rule", f"{stem}.q70"
        )
        await wait_until(lambda: any(e.who == f"{stem}.q70" for e in journal.entries), what="the last call")
        await wait_until(lambda: any(e.who == f"{stem}.q50-closed" for e in journal.entries), what="the fault")

    def failed(point: str) -> list[str]:
        return [e.who.removeprefix(f"{stem}.") for e in journal.entries if e.point == point and e.decision == "failed"]

    # a-open and b-bag fail open on each call that reaches them (all but mv's); q50-closed on rm70 alone
    assert sorted(failed(stage)) == ["a-open"] * 3 + ["b-bag"] * 3 + ["q50-closed"]
    assert failed(clean) == []
    quiet_ls = [e.who for e in journal.entries if e.point == clean and e.decision == "continue"]
    assert len(quiet_ls) >= 102  # ls: p-high, p-low and the 100 quiet ones, journaled (journal_neutral)
