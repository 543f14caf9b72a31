"""Runs of consecutive rules in a chain, their conditions compiled into one CEL program each, kept.

A stage of many rules would pay one CEL evaluation (and one trip from Python
into the runtime) per rule per call. A run's conditions are compiled once into
two programs over the same activation: ``quiet`` (whether any condition holds:
``false`` when every one is exactly ``false``, the common case, one bool back,
nothing else to do) and ``values`` (the list of them, for a call where some
rule's condition holds). ``quiet`` is the conditions joined by ``||``, which
CEL evaluates a quarter faster than a comprehension over their list; a run
whose conditions the checker will not join (one typed other than bool) falls
back to the comprehension. A condition
that cannot be evaluated on a payload makes either an error, and the caller
then evaluates each rule by itself, so every fault reads as it would alone.
Both programs read a field path their conditions share once, bound with
``cel.bind`` (bus._middleware.rules.shared); a run whose rewritten programs do
not compile is compiled as written.

A chain's own run (its links unfiltered: no matcher or scope took any away) is
found by the identity of the chain's tuple of links, kept with it; a filtered
run by its rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from bus._middleware.rules.compile import Rule, run_env
from bus._middleware.rules.shared import bind, shared

#: Runs kept per cache (the runs a stage's matchers and scopes make are few; a flood starts the cache over).
RUNS_KEPT: Final = 512
#: Conditions one program holds at most (longer runs are evaluated rule by rule).
RUN_LIMIT: Final = 1000


@dataclass(frozen=True, slots=True, eq=False)
class RuleRun:
    """The programs of a run of ``size`` rules, and their qualified names in chain order."""

    size: int
    names: tuple[str, ...]
    quiet: Any  # cel Expression: bool, whether any condition holds (false: every one is false)
    values: Any  # cel Expression: the list of the conditions' values


_BY_RULES: dict[tuple[Rule, ...], RuleRun | None] = {}
_BY_CHAIN: dict[tuple[int, int], tuple[Sequence[Any], RuleRun | None]] = {}


def run_of(links: Sequence[Any], start: int) -> RuleRun | None:
    """The run of rules from ``links[start]`` (links whose ``rule`` is set), or None for a run of one rule or
    one too long to compile together."""
    if isinstance(links, tuple):  # a chain's own links: the same tuple on every call
        kept = _BY_CHAIN.get((id(links), start))
        if kept is not None and kept[0] is links:
            return kept[1]
        run = _of_rules(_rules(links, start))
        if len(_BY_CHAIN) >= RUNS_KEPT:
            _BY_CHAIN.clear()
        _BY_CHAIN[(id(links), start)] = (links, run)  # the tuple kept alive with it: its id is not reused
        return run
    return _of_rules(_rules(links, start))


def _rules(links: Sequence[Any], start: int) -> tuple[Rule, ...]:
    out: list[Rule] = []
    for link in links[start:]:
        if link.rule is None or link.rule.cedar is not None:  # a Cedar rule is asked by itself
            break
        out.append(link.rule)
    return tuple(out)


def _of_rules(rules: tuple[Rule, ...]) -> RuleRun | None:
    if len(rules) < 2:
        return None
    if rules in _BY_RULES:
        return _BY_RULES[rules]
    if len(_BY_RULES) >= RUNS_KEPT:
        _BY_RULES.clear()
    run = None
    if len(rules) <= RUN_LIMIT:
        sources = [rule.source for rule in rules]
        bound, rewritten = shared(sources)
        run = _compiled(rules, bound, rewritten) if bound else None
        if run is None:
            run = _compiled(rules, [], sources)
    _BY_RULES[rules] = run
    return run


def _compiled(rules: tuple[Rule, ...], bound: list[str], sources: list[str]) -> RuleRun | None:
    """The run's programs over ``sources`` (its conditions, reading ``bound``'s names), or None if they do not
    compile (each rule is then evaluated alone)."""
    listed = "[" + ", ".join(f"({source}\n)" for source in sources) + "]"
    try:
        return RuleRun(
            len(rules),
            tuple(rule.qualname for rule in rules),
            _any(bound, sources, listed),
            run_env().compile(bind(bound, listed)),
        )
    except RuntimeError:
        return None


def _any(bound: list[str], sources: list[str], listed: str) -> Any:
    """The program saying whether any condition of the run holds: false only when every one is false."""
    try:
        return run_env().compile(bind(bound, " || ".join(f"({source}\n)" for source in sources)))
    except RuntimeError:  # a condition the checker types other than bool: the comprehension takes any type
        return run_env().compile(bind(bound, f"{listed}.exists(held, held != false)"))


def evaluate(run: RuleRun, act: Any) -> bool | list[Any] | None:
    """True when every condition of the run is false; else their values; None when they cannot be evaluated."""
    held = run.quiet.eval(act).value()
    if held is False:
        return True
    if held is not True:  # an error: some condition fails on this payload
        return None
    result = run.values.eval(act)
    values = result.plain_value() if result.type().name() != "ERROR" else None
    return values if isinstance(values, list) and len(values) == run.size else None


def forget() -> None:
    """Drop every kept run (their programs are compiled again on the next call that needs them)."""
    _BY_RULES.clear()
    _BY_CHAIN.clear()
