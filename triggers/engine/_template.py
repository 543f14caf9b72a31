"""Prompt templates: ``{payload.total}`` and friends, filled from the event.

Only ``{field.path}`` placeholders exist (no expressions, no attribute access
into Python objects), so a template from a config file cannot run code.
Strings go in as they are; other values as JSON; a missing field as empty.
``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import orjson

from bus._core.envelope import Event
from bus._core.errors import ConfigError
from triggers.engine._fields import MISSING, lookup, valid_path

_PLACEHOLDER: Final = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


@dataclass(frozen=True)
class Template:
    text: str
    fields: tuple[str, ...]

    @classmethod
    def compile(cls, text: str, where: str) -> Template:
        fields = []
        for match in _PLACEHOLDER.finditer(text):
            name = match.group(1)
            if name is None:
                continue
            if not valid_path(name):
                raise ConfigError(f"{where}: {{{name}}} is not a field path (event, session_id, payload.<name> ...)")
            fields.append(name)
        stray = _PLACEHOLDER.sub("", text)
        if "{" in stray or "}" in stray:
            raise ConfigError(f"{where}: unbalanced brace (write {{{{ or }}}} for a literal one)")
        return cls(text, tuple(fields))

    def render(self, event: Event) -> str:
        def fill(match: re.Match[str]) -> str:
            token = match.group(0)
            if token in ("{{", "}}"):
                return token[0]
            value = lookup(event, match.group(1))
            if value is MISSING or value is None:
                return ""
            return value if isinstance(value, str) else orjson.dumps(value).decode()

        return _PLACEHOLDER.sub(fill, self.text)
