"""Ordering a stage's handlers into a chain by their before/after references, then priority.

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

from bus.core.declaration import Declaration
from bus.core.errors import BrokenChain


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
