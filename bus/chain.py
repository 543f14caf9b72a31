"""Ordering a stage's handlers into a chain by their before/after references.

The order is a topological sort of the references (ties broken by name, so
every kernel computes the same chain), never registration time. A cycle or a
reference to a handler not declared on the stage breaks the whole chain: the
kernel then calls none of it and says why.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from bus.declaration import Declaration


class BrokenChain(Exception):
    """The stage's declarations cannot be ordered."""

    def __init__(self, stage: str, reason: str) -> None:
        self.stage = stage
        self.reason = reason
        super().__init__(f"chain of {stage!r} is broken: {reason}")


def order(stage: str, decls: Sequence[Declaration]) -> list[Declaration]:
    """The handlers of ``stage`` in chain order; raise BrokenChain on a cycle or dangling reference."""
    by_name = {decl.qualname: decl for decl in decls}
    edges: dict[str, set[str]] = {name: set() for name in by_name}
    for decl in decls:
        for ref in decl.before:
            _need(stage, by_name, decl, ref)
            edges[decl.qualname].add(ref)
        for ref in decl.after:
            _need(stage, by_name, decl, ref)
            edges[ref].add(decl.qualname)
    indegree = {name: 0 for name in by_name}
    for targets in edges.values():
        for target in targets:
            indegree[target] += 1
    ready = [name for name, count in indegree.items() if count == 0]
    heapq.heapify(ready)
    out: list[Declaration] = []
    while ready:
        name = heapq.heappop(ready)
        out.append(by_name[name])
        for target in edges[name]:
            indegree[target] -= 1
            if indegree[target] == 0:
                heapq.heappush(ready, target)
    if len(out) < len(by_name):
        stuck = sorted(name for name, count in indegree.items() if count > 0)
        raise BrokenChain(stage, f"cycle among {', '.join(stuck)}")
    return out


def _need(stage: str, by_name: dict[str, Declaration], decl: Declaration, ref: str) -> None:
    if ref not in by_name:
        raise BrokenChain(stage, f"{decl.qualname} refers to {ref}, which is not declared on {stage}")
    if ref == decl.qualname:
        raise BrokenChain(stage, f"{decl.qualname} refers to itself")
