"""The rules a kernel knows: the fleet's files from the ``hookbus_rules`` bucket and its own per-agent files.

Each bucket key is a file stem holding the file's YAML. A file that does not
parse or compile is refused whole (logged, and reported to ``on_refused``) and
the file's last good version stays in force. Every version of a rule seen is
kept (a few per name), so the approved version keeps running while a changed
one waits for ``hookbus approve``; a kernel that never saw the approved version
compiles it again from the trust record's text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from bus._middleware.rules.compile import Rule, compile_file, from_text
from bus._middleware.rules.errors import RuleFileError
from bus._middleware.rules.files import parse, read_path

log = logging.getLogger("hookbus.middleware")

#: Versions of one rule a kernel keeps (the approved one among them while a change waits).
VERSIONS_KEPT: Final = 4

#: Called with (file, why) for a file refused (its last good version stays).
Refused = Callable[[str, str], None]


def load_files(paths: Iterable[str | Path]) -> tuple[Rule, ...]:
    """Compile local rule files (``Bus(rules=...)``): RuleFileError for the first fault, at start."""
    out: list[Rule] = []
    for path in paths:
        out += compile_file(read_path(path))
    return tuple(out)


def split_sources(sources: Iterable[str | Path]) -> tuple[list[str | Path], frozenset[str]]:
    """``Bus(rules=...)`` entries: paths of local files, and bare stems naming ``global: false`` bucket files."""
    paths: list[str | Path] = []
    stems: set[str] = set()
    for source in sources:
        text = str(source)
        if isinstance(source, Path) or "/" in text or text.endswith((".yaml", ".yml")):
            paths.append(source)
        else:
            stems.add(text)
    return paths, frozenset(stems)


class RuleBook:
    """The kernel's rules: local ones (run as managed), and the bucket's (trusted only once approved)."""

    def __init__(self, local: tuple[Rule, ...] = (), named: frozenset[str] = frozenset()) -> None:
        self.local = local
        self.named = named  # stems of global: false files this kernel takes
        self.files: dict[str, tuple[Rule, ...]] = {}
        self.errors: dict[str, str] = {}  # stem -> why its newest version was refused
        self._versions: dict[str, dict[str, Rule]] = {}
        self.on_refused: Refused | None = None
        for rule in local:
            self._keep(rule)

    def fleet(self) -> list[Rule]:
        """The bucket's rules this kernel takes (global files, and the non-global ones it names)."""
        return [
            rule for stem in sorted(self.files) for rule in self.files[stem] if rule.is_global or stem in self.named
        ]

    def on_file(self, key: str, data: bytes | None) -> bool:
        """Take in one bucket entry; whether the rules changed (a refused file changes nothing)."""
        if data is None:
            return self.files.pop(key, None) is not None
        try:
            rules = compile_file(parse(data.decode("utf-8"), f"{key}.yaml", key))
        except (RuleFileError, UnicodeDecodeError) as exc:
            why = str(exc)
            self.errors[key] = why
            kept = "its last good version stays" if key in self.files else "no version of it is in force"
            log.error("rule file %s refused (%s): %s", key, kept, why)
            if self.on_refused is not None:
                self.on_refused(key, why)
            return False
        self.errors.pop(key, None)
        for rule in rules:
            self._keep(rule)
        self.files[key] = rules
        return True

    def version(self, qualname: str, identity: str, approved_text: str | None) -> Rule | None:
        """The rule ``qualname`` as approved (identity), if known or compilable from the trust record's text."""
        rule = self._versions.get(qualname, {}).get(identity)
        if rule is not None or not approved_text:
            return rule
        module = qualname.partition(".")[0]
        try:
            rule = from_text(module, approved_text)
        except (RuleFileError, ValueError, KeyError, TypeError):
            return None
        if rule.identity != identity:  # a record whose text is not what it approves: not run
            return None
        self._keep(rule)
        return rule

    def _keep(self, rule: Rule) -> None:
        kept = self._versions.setdefault(rule.qualname, {})
        kept[rule.identity] = rule
        while len(kept) > VERSIONS_KEPT:
            kept.pop(next(iter(kept)))
