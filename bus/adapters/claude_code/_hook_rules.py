"""The rules agents' hook systems share: how a matcher selects a tool, and which permission decision wins.

One place for both, used by the claude-hooks handlers, ``hookbus claude-hook``
and the other agents' adapters.

Matchers, as Claude Code reads them: ``*``, an empty string or no matcher
selects every tool; a matcher made only of name characters (letters, digits,
``_``, ``-``) and ``|`` is an exact name or a list of exact names (``Bash``
does not select ``BashOutput``); anything else is an unanchored regular
expression, searched anywhere in the name (``^Bash`` selects ``BashOutput``,
``mcp__github__.*`` every tool of that server). :func:`regex_matcher` is the
plain unanchored reading, for agents whose matcher is always a pattern.
Patterns are compiled with RE2 (linear-time: a hostile pattern cannot freeze
the process); one RE2 refuses (backreferences, lookaround) is an error.

Permission decisions of several hooks on one call combine as Claude Code
combines them: ``deny`` over ``defer`` over ``ask`` over ``allow``
(:func:`strongest`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from bus.adapters._errors import PatternError

#: Memory RE2 may use for one compiled matcher (its default).
MAX_MEMORY: Final = 8 << 20
#: A matcher made only of these is exact names (``|``-separated), not a pattern.
_EXACT: Final = re.compile(r"[A-Za-z0-9_\-| ]+")

Permission = Literal["allow", "ask", "defer", "deny"]
#: The permission decisions, weakest first.
PERMISSIONS: Final[tuple[Permission, ...]] = ("allow", "ask", "defer", "deny")
_RANK: Final = {name: rank for rank, name in enumerate(PERMISSIONS)}


@dataclass(frozen=True)
class Matcher:
    """A compiled matcher: ``wants(tool)`` says whether a hook of this matcher runs for ``tool``."""

    text: str
    names: frozenset[str] | None = None  # exact names; None with pattern None: every tool
    pattern: object | None = None  # an RE2 pattern, searched unanchored

    def wants(self, tool: str) -> bool:
        if self.names is not None:
            return tool in self.names
        if self.pattern is None:
            return True
        return self.pattern.search(tool) is not None  # type: ignore[attr-defined]


def _compile(text: str) -> object:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEMORY
    try:
        return re2.compile(text, options=options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        raise PatternError(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None


def regex_matcher(text: str | None) -> Matcher:
    """``text`` as an unanchored pattern (``*``, empty or None: every tool); PatternError if RE2 refuses it."""
    if text is None or text in ("", "*"):
        return Matcher(text or "")
    return Matcher(text, pattern=_compile(text))


def claude_matcher(text: str | None) -> Matcher:
    """``text`` as Claude Code reads a matcher (see the module docstring); PatternError if RE2 refuses it."""
    if text is None or text.strip() in ("", "*"):
        return Matcher(text or "")
    if _EXACT.fullmatch(text):
        return Matcher(text, names=frozenset(part.strip() for part in text.split("|") if part.strip()))
    return regex_matcher(text)


def permission_of(value: object) -> Permission | None:
    """``value`` as a permission decision, or None when it is not one."""
    return value if isinstance(value, str) and value in _RANK else None


def strongest(decisions: Iterable[Permission | None]) -> Permission | None:
    """The decision that wins among ``decisions``: deny > defer > ask > allow (None: nobody decided)."""
    best: Permission | None = None
    for decision in decisions:
        if decision is not None and (best is None or _RANK[decision] > _RANK[best]):
            best = decision
    return best
