"""Matchers and permission precedence as Claude Code reads them (bus.adapters.claude_code._hook_rules).

The cases are the ones Claude Code's hooks reference names: ``*``/empty select
every tool, a plain name is exact, ``Edit|Write`` a list, anything else an
unanchored pattern (``^Bash`` selects ``BashOutput``, ``mcp__github__.*``).
"""

from __future__ import annotations

import pytest

from bus.adapters._errors import PatternError
from bus.adapters.claude_code._hook_rules import claude_matcher, regex_matcher, strongest


@pytest.mark.parametrize(
    ("matcher", "tool", "wanted"),
    [
        ("*", "Bash", True),
        ("", "anything", True),
        (None, "Read", True),
        ("Bash", "Bash", True),
        ("Bash", "BashOutput", False),
        ("^Bash", "BashOutput", True),
        ("Edit|Write", "Write", True),
        ("Edit|Write", "MultiEdit", False),
        ("Edit|MultiEdit|Write", "MultiEdit", True),
        ("mcp__github__.*", "mcp__github__create_issue", True),
        ("mcp__github__.*", "mcp__gitlab__create_issue", False),
        ("Notebook.*", "NotebookEdit", True),
        ("Write|Edit.*", "NotebookEdit", True),  # unanchored: Edit inside the name
        (".*", "x", True),
    ],
)
def test_claude_code_matchers(matcher: str | None, tool: str, wanted: bool) -> None:
    assert claude_matcher(matcher).wants(tool) is wanted


def test_a_regex_matcher_searches_unanchored() -> None:
    assert regex_matcher("Bash").wants("BashOutput")
    assert regex_matcher("^Bash$").wants("Bash") and not regex_matcher("^Bash$").wants("BashOutput")


def test_a_hostile_matcher_runs_in_linear_time_and_re2_refusals_are_named() -> None:
    assert not claude_matcher("(a+)+$x").wants("a" * 5000)  # backtracking would hang here
    with pytest.raises(PatternError):
        claude_matcher(r"(a)\1")


def test_permission_precedence_is_deny_defer_ask_allow() -> None:
    assert strongest(["allow", "ask"]) == "ask"
    assert strongest(["ask", "defer", "allow"]) == "defer"
    assert strongest(["allow", "deny", "defer"]) == "deny"
    assert strongest([None, "allow"]) == "allow"
    assert strongest([]) is None
