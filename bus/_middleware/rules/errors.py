"""The errors of rule files::

MiddlewareError
└── RuleFileError      a rule file is refused: names the file, the line and the reason (also ValueError)
"""

from __future__ import annotations

from bus._core.errors import MiddlewareError


class RuleFileError(MiddlewareError, ValueError):
    """A rule file (or one rule of it) is refused; the file's last good version stays in force."""

    def __init__(self, file: str, line: int, reason: str) -> None:
        self.file = file
        self.line = line
        self.reason = reason
        super().__init__(f"{file}:{line}: {reason}")
