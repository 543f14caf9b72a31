"""Budgets of the reference runner: what each session, group and user spent today, priced from budgets.yaml.

The runner charges every model call (the provider's ``usage``, else an
approximate count) to each layer's key: the session (the turn's session, else
the turn), the group (the runner's group, by default the agent) and the user
(the NATS user that published the triggering event, as its subject vouches:
``TurnRequest.publisher``; never a payload field, which any publisher writes). Crossing a
layer's ``warn_at`` and reaching its ``max`` each yield one
``eva.budget.threshold`` per key, level and UTC day (``level`` the layer, as
agent_os names it; ``kind`` warn or exhausted); a key at its ``max`` cancels
``llm.request`` until the day ends. The books are a :class:`~triggers.agent._books.Ledger`:
the fleet's in JetStream (``hookbus agent``; every process of an agent and every
agent of a group or user spends from the same book, and a restart keeps the
day) or the process's own. docs/stages.md#budgets has the file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeGuard

from bus._core.errors import ConfigError, RegistryError
from bus._core.schema import convert
from bus._runtime.config_files import read_yaml
from triggers.agent._books import Ledger, LocalBooks
from triggers.agent._config_schema import BudgetLayer, BudgetsFile, ModelPrice

log = logging.getLogger("hookbus.agent.budgets")

BUDGETS_FILE: Final = "budgets.yaml"
LAYERS: Final = ("session", "group", "user")
#: Tokens per price unit in the price table (USD per million tokens).
_PER: Final = 1_000_000
#: What the books count a USD in (they keep integers).
NANO: Final = 1_000_000_000


def utc_day() -> str:
    """Today's UTC date, the budgets' period: ``2026-11-30``."""
    return datetime.now(UTC).strftime("%Y-%m-%d")


def load(path: Path) -> BudgetsFile:
    """budgets.yaml checked: every problem names the file and the field; a USD layer needs prices."""
    doc = read_yaml(path, missing_ok=False)
    config = convert(doc if doc is not None else {}, BudgetsFile, str(path), ConfigError)
    usd = [name for name in LAYERS if (layer := getattr(config, name)) is not None and layer.unit == "usd"]
    if usd and not config.prices:
        raise ConfigError(f"{path}: layer {usd[0]!r} counts USD but 'prices' is empty")
    return config


def check_group(config: BudgetsFile, agent: str, group: str | None, path: Path) -> None:
    """The group this agent spends from, checked against budgets.yaml's ``groups:`` when the books are shared.

    A group's book counts only the members ``groups:`` lists (and each reader's
    own share): a group shared under another name than the agent's but not
    listed, or listed without this agent, would let each member see only part
    of what the group spent, and the group's limit would not hold. So such an
    agent is refused at start (ConfigError naming the missing entry).
    """
    if config.group is None or group is None or group == agent:
        return
    members = config.groups.get(group)
    if members is None:
        raise ConfigError(
            f"{path}: --group {group!r} has no 'groups.{group}' entry: list the group's agents"
            f" (groups: {{{group}: [{agent}, ...]}}) so each counts the others' spending"
        )
    if agent not in members:
        raise ConfigError(f"{path}: 'groups.{group}' does not list {agent!r}: its spending would go uncounted")


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, slots=True)
class Usage:
    """One model call's tokens."""

    prompt: int
    completion: int

    @classmethod
    def reported(cls, usage: object) -> Usage | None:
        """The provider's ``usage`` if it holds counts a call can have spent (integers, none negative), else None.

        A negative or garbled count would credit the books or fail the turn: such
        a call is counted approximately instead, as one with no usage reported.
        """
        if not isinstance(usage, dict):
            return None
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        completion = 0 if completion is None else completion
        if not (_count(prompt) and _count(completion)):
            return None
        return cls(prompt, completion)


@dataclass
class _Day:
    """One UTC day of this process: per (layer, key, kind) what it announced, and its own totals."""

    day: str
    announced: set[tuple[str, str, str]] = field(default_factory=set)
    usd: float = 0.0
    tokens: int = 0
    calls: int = 0


class BudgetBook:
    """One agent's spending today against budgets.yaml, and the agent's daily total."""

    def __init__(self, config: BudgetsFile, today: Callable[[], str] = utc_day, ledger: Ledger | None = None) -> None:
        self.config = config
        #: Where spending is kept: the fleet's books, or (None given) this process's own.
        self.ledger: Ledger = LocalBooks() if ledger is None else ledger
        self._today = today
        self._books = _Day(today())
        self._warned: set[str] = set()

    def price(self, model: str, usage: Usage) -> float:
        """USD of a call; a model missing from the table costs as the dearest listed one (and is logged once)."""
        price = self.config.prices.get(model) or self.config.prices.get("default")
        if price is None:
            free = ModelPrice(input=0, output=0)
            price = max(self.config.prices.values(), key=lambda p: p.input + p.output, default=free)
            if model not in self._warned:
                self._warned.add(model)
                log.warning("budgets: model %r has no price and no 'default': charged at the dearest listed", model)
        return (usage.prompt * price.input + usage.completion * price.output) / _PER

    def roll(self) -> dict[str, Any] | None:
        """The ended day's totals (for eva.spend.day) if the day changed since the last call, else None."""
        today = self._today()
        if today == self._books.day:
            return None
        ended, self._books = self._books, _Day(today)
        return {"day": ended.day, "total": round(ended.usd, 6), "tokens": ended.tokens, "calls": ended.calls}

    async def exhausted(self, keys: dict[str, str | None]) -> str | None:
        """Why no model call may go out for these keys today, or None."""
        day, layers = self._today(), self._layers(keys)
        try:
            books = await self.ledger.spent_many([(name, day, key) for name, key, _ in layers])
        except RegistryError as exc:  # a budget nobody can check is not open: no model call goes out
            return f"budget books unreachable: {exc}"
        for (name, key, layer), units in zip(layers, books, strict=True):
            spent = _value(units, layer)
            if spent >= layer.max:
                limit = _amount(layer.max, layer)
                return f"budget exhausted: {name} {key} spent {_amount(spent, layer)} of {limit} today"
        return None

    async def charge(self, keys: dict[str, str | None], model: str, usage: Usage) -> list[dict[str, Any]]:
        """Book one call; returns the eva.budget.threshold payloads it crossed (each once per key, kind, day)."""
        usd = self.price(model, usage) if self.config.prices else 0.0
        tokens = usage.prompt + usage.completion
        books = self._books
        books.usd, books.tokens, books.calls = books.usd + usd, books.tokens + tokens, books.calls + 1
        layers = self._layers(keys)
        amounts = [round(usd * NANO) if layer.unit == "usd" else tokens for _, _, layer in layers]
        charges = [(name, books.day, key, amount) for (name, key, _), amount in zip(layers, amounts, strict=True)]
        try:
            totals = await self.ledger.add_many(charges)
        except RegistryError as exc:  # the call was made: said, and the next check finds the books or refuses
            log.error("budgets: a call of %d tokens could not be booked: %s", tokens, exc)
            return []
        crossed = []
        for (name, key, layer), amount, total in zip(layers, amounts, totals, strict=True):
            spent, before = _value(total, layer), _value(total - amount, layer)
            for kind, at in (("warn", layer.warn_at), ("exhausted", 1.0)):
                if spent / layer.max >= at > before / layer.max and (name, key, kind) not in books.announced:
                    books.announced.add((name, key, kind))
                    crossed.append(_threshold(books.day, name, key, kind, spent, layer))
        return crossed

    def _layers(self, keys: dict[str, str | None]) -> list[tuple[str, str, BudgetLayer]]:
        out = []
        for name in LAYERS:
            layer, key = getattr(self.config, name), keys.get(name)
            if layer is not None and key:
                out.append((name, key, layer))
        return out


def _value(units: int, layer: BudgetLayer) -> float:
    """What the books' integer means in the layer's unit."""
    return units / NANO if layer.unit == "usd" else float(units)


def _threshold(day: str, name: str, key: str, kind: str, spent: float, layer: BudgetLayer) -> dict[str, Any]:
    """An eva.budget.threshold payload; ``layer`` repeats ``level``: the old name, deprecated, kept one release."""
    numbers = {"spent": round(spent, 6), "max": layer.max, "ratio": round(spent / layer.max, 4)}
    return {"level": name, "kind": kind, "key": key, **numbers, "unit": layer.unit, "day": day, "layer": name}


def _amount(value: float, layer: BudgetLayer) -> str:
    return f"{value:.6g} USD" if layer.unit == "usd" else f"{value:.0f} tokens"
