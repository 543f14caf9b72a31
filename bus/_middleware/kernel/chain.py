"""A stage's middleware chain: its links as the kernel calls them, their order, and how one is built.

:class:`StageChain` is what ``intercept`` reads: the runnable :class:`Link`
objects in order, the holds, the handlers waiting, disabled or rejected, or
why the chain is broken; the view places each handler in its stage's
:class:`ChainParts`, which build it.

The order is a topological sort of the references; among the handlers the
references leave unordered, higher ``priority`` runs first, then the handler
approved first (the trust record's first approval time), then the name (so
every kernel computes the same chain). Handlers with no approval time (managed
by the operator's config) come after approved ones of their priority. A cycle or a
reference to a handler nobody knows breaks the whole chain: the kernel then
calls none of it and says why. A reference to a handler the kernel knows but
that is not in the chain (its module is gone, or it is not approved) orders
nothing and breaks nothing.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from bus._core.declaration import Declaration
from bus._core.errors import BrokenChain
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.taking import Taking


def order_with_bag(
    stage: str,
    decls: Sequence[Declaration],
    known: Collection[str] = (),
    first_approved: Mapping[str, float] | None = None,
) -> tuple[list[Declaration], str | None]:
    """The chain order with every bag producer before its consumers on the stage.

    If the producer-before-consumer edges make a cycle, they are dropped (the
    references and priorities order alone) and the second value says why.
    Returns (order, note); raises BrokenChain as :func:`order` does.
    """
    extra = bag_edges(decls)
    if not extra:
        return order(stage, decls, known, first_approved), None
    try:
        return order(stage, decls, known, first_approved, extra), None
    except BrokenChain as exc:
        plain = order(stage, decls, known, first_approved)  # a references' own fault raises here too
        return plain, f"bag inputs and outputs form a cycle ({exc.reason}): ordered by references and priority"


def bag_edges(decls: Sequence[Declaration]) -> list[tuple[str, str]]:
    """(producer, consumer) for each bag key a handler of ``decls`` writes and another reads."""
    producers: dict[str, list[str]] = {}
    for decl in decls:
        for key in decl.outputs:
            producers.setdefault(key, []).append(decl.qualname)
    edges = []
    for decl in decls:
        for item in decl.inputs:
            edges += [(name, decl.qualname) for name in producers.get(item.key, ()) if name != decl.qualname]
    return edges


def order(
    stage: str,
    decls: Sequence[Declaration],
    known: Collection[str] = (),
    first_approved: Mapping[str, float] | None = None,
    extra: Sequence[tuple[str, str]] = (),
) -> list[Declaration]:
    """The handlers of ``stage`` in chain order; raise BrokenChain on a cycle or dangling reference.

    ``known``: names that are not dangling although they are not in ``decls``
    (references to them are left out of the order). ``first_approved``:
    qualname -> Unix time first approved, the tie-break between equal priorities.
    ``extra``: more (earlier, later) edges between names of ``decls`` (the bag's).
    """
    approved = first_approved or {}
    by_name = {decl.qualname: decl for decl in decls}
    edges: dict[str, set[str]] = {name: set() for name in by_name}
    for decl in decls:
        for ref in decl.before:
            if _need(stage, by_name, known, decl, ref):
                edges[decl.qualname].add(ref)
        for ref in decl.after:
            if _need(stage, by_name, known, decl, ref):
                edges[ref].add(decl.qualname)
    for earlier, later in extra:
        edges[earlier].add(later)
    indegree = {name: 0 for name in by_name}
    for targets in edges.values():
        for target in targets:
            indegree[target] += 1
    rank = {name: (-decl.priority, approved.get(name, math.inf), name) for name, decl in by_name.items()}
    ready = [rank[name] for name, count in indegree.items() if count == 0]
    heapq.heapify(ready)
    out: list[Declaration] = []
    while ready:
        name = heapq.heappop(ready)[2]
        out.append(by_name[name])
        for target in edges[name]:
            indegree[target] -= 1
            if indegree[target] == 0:
                heapq.heappush(ready, rank[target])
    if len(out) < len(by_name):
        stuck = sorted(name for name, count in indegree.items() if count > 0)
        raise BrokenChain(stage, f"cycle among {', '.join(stuck)}")
    return out


def _need(stage: str, by_name: dict[str, Declaration], known: Collection[str], decl: Declaration, ref: str) -> bool:
    """Whether ``ref`` is an edge of the order; raise BrokenChain if it dangles or is a self-reference."""
    if ref == decl.qualname:
        raise BrokenChain(stage, f"{decl.qualname} refers to itself")
    if ref in by_name:
        return True
    if ref in known:
        return False
    raise BrokenChain(stage, f"{decl.qualname} refers to {ref}, which is not declared on {stage}")


@dataclass(frozen=True, slots=True)
class StageChain:
    stage: str
    links: tuple[Link, ...]
    broken: str | None = None
    #: Gone or replaced trusted fail-closed handlers: a call any of them wants is cancelled at once.
    holds: tuple[Link, ...] = ()
    #: Declared handlers that may not run (untrusted, modified): journaled as denied, never called.
    waiting: tuple[Link, ...] = ()
    #: In a broken chain, the trusted fail-closed handler whose promise makes its calls cancel.
    guard: str | None = None
    #: Runnable handlers an operator disabled: never called, never holding (``hookbus enable`` restores them).
    disabled: tuple[Link, ...] = ()
    #: Why the order is not what the declarations ask (the bag's edges made a cycle and were dropped).
    note: str | None = None
    #: Whether a handler of the chain reads or writes the bag (the kernel then keeps the session's bag).
    bag: bool = False
    #: Declared versions an operator rejected (``hookbus reject``): never called, not in the approval queue.
    rejected: tuple[Link, ...] = ()
    #: Whether a rule is among the links (the kernel then makes the rules' activation for the call).
    rules: bool = False
    #: The index of the links a call reaches by its match field and context; None when no link has a matcher or
    #: a scope: every call takes ``links`` itself (the same tuple each call).
    taking: Taking | None = field(default=None, compare=False)
    #: The names (payload, ctx, bag) the rules among the links read: all a call's activation holds.
    reads: frozenset[str] = frozenset()


@dataclass
class ChainParts:
    """One stage's handlers while a chain is built."""

    runs: list[Link] = field(default_factory=list)
    holds: list[Link] = field(default_factory=list)
    waiting: list[Link] = field(default_factory=list)
    disabled: list[Link] = field(default_factory=list)
    rejected: list[Link] = field(default_factory=list)

    def chain(self, stage: str, known: frozenset[str], first: Mapping[str, float]) -> StageChain:
        members = {link.decl.qualname: link for link in self.runs}
        held = tuple(sorted(self.holds, key=lambda link: link.decl.qualname))
        waiting = tuple(sorted(self.waiting, key=lambda link: link.decl.qualname))
        disabled = tuple(sorted(self.disabled, key=lambda link: link.decl.qualname))
        rejected = tuple(sorted(self.rejected, key=lambda link: link.decl.qualname))
        decls = [link.decl for link in self.runs] + [link.decl for link in held]
        try:
            ordered, note = order_with_bag(stage, decls, known, first)
        except BrokenChain as exc:
            shadows = {link.decl.qualname for link in self.runs if link.shadow}
            guards = sorted(decl.qualname for decl in decls if decl.fail_closed and decl.qualname not in shadows)
            guard = guards[0] if guards else None
            return StageChain(stage, (), exc.reason, held, waiting, guard, disabled, rejected=rejected)
        links = tuple(members[decl.qualname] for decl in ordered if decl.qualname in members)
        bag = any(link.decl.inputs or link.decl.outputs for link in links)
        rules = any(link.rule is not None for link in links)
        taking = None if all(link.match is None and not link.scoped for link in links) else Taking(links)
        reads = frozenset[str]().union(*(link.rule.reads for link in links if link.rule is not None))
        return StageChain(stage, links, None, held, waiting, None, disabled, note, bag, rejected, rules, taking, reads)
