"""The links of a chain a call reaches, by its match field and its context, worked out once and kept.

A stage of many handlers with matchers (100 rules for 100 tools) would walk
every link on every call to read its ``match`` and its scope. What a call
reaches depends only on the match field's value and on the context fields the
scoped links read (``agent`` for grants, the ``when`` fields), so a chain's
index holds, from its build, the links each matched name reaches (and those a
name no link matches, or no name, reaches); a chain with scoped links also
keeps the links each context reaches, a bounded number of contexts. The index
is built with its chain (bus._middleware.kernel.chain) and kept on it, so a
chain rebuilt by a reload or a trust change has an index of its own.

Each answer is the same tuple on every call that reaches it, so the runs of
rules among them are found again by identity (bus._middleware.rules.runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from bus._core.declaration import WHEN_FIELDS
from bus._middleware.kernel.link import Link

#: Contexts one chain's index keeps the scoped links' answer for (the many sessions of a day start it over).
SCOPES_KEPT: Final = 1024


class Taking:
    """One chain's index: the links a call reaches, by its match field's value and (for scoped links) context."""

    __slots__ = ("_by_name", "_fields", "_links", "_scoped", "_unmatched")

    def __init__(self, links: tuple[Link, ...]) -> None:
        self._links = links
        names = frozenset[str]().union(*(link.match for link in links if link.match is not None))
        self._by_name = {
            name: tuple(link for link in links if link.match is None or name in link.match) for name in names
        }
        self._unmatched = tuple(link for link in links if link.match is None)
        self._fields = _scope_fields(links)
        self._scoped: dict[tuple[int, tuple[str | None, ...]], tuple[Link, ...]] | None = (
            {} if any(link.scoped for link in links) else None
        )

    def taken(self, value: Any, ctx: Mapping[str, Any]) -> tuple[Link, ...]:
        """The links a call whose match field is ``value`` reaches (a value that is neither text nor absent, what
        no honest agent sends, reaches every matcher), in chain order."""
        if value is None:
            reached = self._unmatched
        elif isinstance(value, str):
            reached = self._by_name.get(value, self._unmatched)
        else:
            reached = self._links
        if self._scoped is None:
            return reached
        key = (id(reached), tuple(_text(ctx.get(name)) for name in self._fields))
        kept = self._scoped.get(key)
        if kept is None:
            if len(self._scoped) >= SCOPES_KEPT:
                self._scoped.clear()
            kept = tuple(link for link in reached if not link.scoped or link.in_scope(ctx))
            self._scoped[key] = kept  # ``reached`` is one of this index's tuples: its id is not reused
        return kept


def _scope_fields(links: Sequence[Link]) -> tuple[str, ...]:
    """The context fields the scoped links read: ``agent`` for grants, each ``when`` field filled."""
    read: set[str] = set()
    for link in links:
        if not link.scoped:
            continue
        if link.agents is not None:
            read.add("agent")
        read.update(single for plural, single in WHEN_FIELDS.items() if getattr(link.decl.when, plural))
    return tuple(sorted(read))


def _text(value: Any) -> str | None:
    """A context field as a scope reads it: a text, or not one (every other value reads alike)."""
    return value if isinstance(value, str) else None
