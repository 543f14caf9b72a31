"""Trigger filter patterns: RE2, so matching time grows linearly with the input, whatever the pattern.

A ``matches`` filter runs on every event of its subject, with a payload any
emitter chose. With a backtracking engine a pattern like ``(a+)+$`` on a few
dozen characters runs for ages and freezes the whole process; RE2 has no
backtracking, so it cannot. The price: no backreferences and no lookaround,
which RE2 refuses at load time with the reason.
"""

from __future__ import annotations

from typing import Final, Protocol

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from bus.adapters._errors import PatternError

#: Memory RE2 may use for one compiled pattern (its default); bigger patterns are refused.
MAX_MEMORY: Final = 8 << 20


class Pattern(Protocol):
    """The part of a compiled pattern the filters use."""

    @property
    def pattern(self) -> str: ...

    def search(self, text: str) -> object | None: ...


def compile_pattern(pattern: str) -> Pattern:
    """Compile ``pattern`` for linear-time search, or raise PatternError with RE2's reason."""
    options = re2.Options()
    options.log_errors = False  # the reason goes into the error, not to stderr
    options.max_mem = MAX_MEMORY
    try:
        compiled: Pattern = re2.compile(pattern, options=options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        raise PatternError(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None
    return compiled
