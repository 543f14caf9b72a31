"""The chain's index of the links a call reaches (bus._middleware.kernel.taking): what the per-call walk took."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from bus._core.declaration import declare
from bus._middleware.kernel import taking
from bus._middleware.kernel.link import Link
from bus._middleware.trust import TrustState


def _link(name: str, match: Sequence[str] | None, when: Mapping[str, Any] | None, agents: Sequence[str] | None) -> Link:
    decl = declare("idx", name, "tool.call", match=match, when=when)
    return Link(
        decl,
        "subject",
        False,
        TrustState.MANAGED,
        frozenset(match) if match is not None else None,
        name,
        agents=frozenset(agents) if agents is not None else None,
        scoped=bool(decl.when) or agents is not None,
    )


def _walked(links: Sequence[Link], value: Any, ctx: Mapping[str, Any]) -> list[Link]:
    """The per-call walk the index replaces: a matcher takes its names (a value neither text nor absent reaches
    every matcher), a scoped link its contexts."""
    return [
        link
        for link in links
        if (link.match is None or not (value is None or isinstance(value, str)) or value in link.match)
        and (not link.scoped or link.in_scope(ctx))
    ]


LINKS = (
    _link("all", None, None, None),
    _link("shell", ["shell"], None, None),
    _link("files", ["read", "write"], None, None),
    _link("trial", None, {"users": ["trial-*"]}, None),
    _link("eva-shell", ["shell"], {"agents": ["eva"]}, None),
    _link("granted", None, None, ["bob"]),
    _link("session", ["write"], {"sessions": ["s1"], "templates": ["t*"]}, None),
    _link("last", None, None, None),
)
VALUES: list[Any] = [None, "shell", "read", "write", "other", "", ["shell"], 3]
CTXS: list[dict[str, Any]] = [
    {},
    {"agent": "eva", "user": "trial-1"},
    {"agent": "bob", "user": "ann", "session": "s1", "template": "t2"},
    {"agent": "eva", "session": "s1", "template": "x"},
    {"agent": 5, "user": None, "session": "s2"},
    {"agent": "bob", "user": "trial-2", "session": "s1", "template": "tt"},
]


def test_the_index_reaches_what_the_walk_reached_for_every_name_and_context_and_keeps_each_answer() -> None:
    for count in range(len(LINKS) + 1):
        for chosen in itertools.combinations(LINKS, count):
            links = tuple(chosen)
            index = taking.Taking(links)
            for _ in range(2):  # the second time from what the index kept
                for value, ctx in itertools.product(VALUES, CTXS):
                    got = index.taken(value, ctx)
                    assert list(got) == _walked(links, value, ctx), ([link.identity for link in links], value, ctx)
                    assert got is index.taken(value, dict(ctx))  # the same tuple: runs found by identity


def test_a_flood_of_contexts_starts_the_kept_ones_over_and_each_still_gets_its_own_answer() -> None:
    links = (LINKS[0], LINKS[3])
    index = taking.Taking(links)
    assert index.taken("shell", {"user": "trial-9"}) == links
    assert index.taken("shell", {"user": "ann"}) == (LINKS[0],)
    for count in range(taking.SCOPES_KEPT + 10):
        user = f"trial-{count}" if count % 2 else f"user-{count}"
        assert len(index.taken(None, {"user": user})) == (2 if count % 2 else 1)
