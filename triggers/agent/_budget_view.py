"""What a handler is told of the agent's budget: one read of the books, the layer nearest its limit.

agent_os gives a hook ``budget_total``, ``budget_spent`` and ``budget_remaining()``;
the reference runner keeps up to three layers (session, group, user), each in
its own unit, in the books of :mod:`triggers.agent._books` (the fleet's, or the
process's own). A handler is told the one with the least left in proportion
(its ``budget_unit`` says USD or tokens); without budgets.yaml, or while the
books cannot be read, nothing (the runner's own check still fails closed).
:func:`budget_fields` is the only place that reads the books for this.
"""

from __future__ import annotations

from typing import Any

from bus._core.errors import RegistryError
from triggers.agent._budgets import BudgetBook, _value


async def budget_fields(book: BudgetBook | None, keys: dict[str, str | None]) -> dict[str, Any]:
    """``budget_total``, ``budget_spent`` and ``budget_unit`` of the tightest layer for ``keys`` ({} without)."""
    if book is None:
        return {}
    layers = book._layers(keys)  # the layers the runner's own check reads, in its order
    if not layers:
        return {}
    day = book._today()
    try:
        books = await book.ledger.spent_many([(name, day, key) for name, key, _ in layers])
    except RegistryError:
        return {}
    tightest: tuple[float, dict[str, Any]] | None = None
    for (_, _, layer), units in zip(layers, books, strict=True):
        spent = _value(units, layer)
        left = 1.0 - spent / layer.max
        if tightest is None or left < tightest[0]:
            tightest = (left, {"budget_total": layer.max, "budget_spent": round(spent, 9), "budget_unit": layer.unit})
    return {} if tightest is None else tightest[1]
