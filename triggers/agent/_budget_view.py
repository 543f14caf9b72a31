"""What a handler is told of the agent's budget: one read of the books, the layer nearest its limit.

agent_os gives a hook ``budget_total``, ``budget_spent`` and ``budget_remaining()``;
the reference runner keeps up to three layers (session, group, user), each in
its own unit. A handler is told the one with the least left in proportion
(its ``budget_unit`` says USD or tokens); without budgets.yaml, nothing.
:func:`budget_fields` is the only place that reads the books for this.
"""

from __future__ import annotations

from typing import Any

from triggers.agent._budgets import LAYERS, BudgetBook


async def budget_fields(book: BudgetBook | None, keys: dict[str, str | None]) -> dict[str, Any]:
    """``budget_total``, ``budget_spent`` and ``budget_unit`` of the tightest layer for ``keys`` ({} without)."""
    if book is None:
        return {}
    tightest: tuple[float, dict[str, Any]] | None = None
    for name in LAYERS:
        layer, key = getattr(book.config, name), keys.get(name)
        if layer is None or not key:
            continue
        spent = book._books.spent.get((name, key), 0.0)  # today's books as this process keeps them
        left = 1.0 - spent / layer.max
        if tightest is None or left < tightest[0]:
            tightest = (left, {"budget_total": layer.max, "budget_spent": round(spent, 9), "budget_unit": layer.unit})
    return {} if tightest is None else tightest[1]
