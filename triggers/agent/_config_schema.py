"""The agent's config files as types: hook_turns.yaml entries and budgets.yaml."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from bus._core.declaration import MAX_TIMEOUT
from bus._runtime.config_types import Name, NonEmpty, Strings

#: How long a hook-turn waits for the model unless its entry says otherwise.
HOOK_TURN_TIMEOUT = 20.0


#: A hook-turn's timeout: at most the protocol's bound; the agent's ``hook_secs`` bounds it when it loads.
HookTurnTimeout = Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT)]


class HookTurn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of hook_turns.yaml: a middleware handler that asks a model."""

    name: Name
    stage: str
    prompt: Annotated[str, msgspec.Meta(pattern=r"\S")]
    match: Strings | msgspec.UnsetType = msgspec.UNSET  # absent: every call of the stage
    fail_closed: bool = False
    #: Seconds; unset: HOOK_TURN_TIMEOUT. ``timeout_s`` is the older spelling, still read (not both).
    timeout: HookTurnTimeout | msgspec.UnsetType = msgspec.UNSET
    timeout_s: HookTurnTimeout | msgspec.UnsetType = msgspec.UNSET
    before: Strings = []
    after: Strings = []
    model: NonEmpty | None = None
    #: The handler's own settings: its ``ctx.config``, shown to the model (and part of its identity).
    config: dict[str, Any] = {}


class HookTurnsFile(msgspec.Struct, forbid_unknown_fields=True):
    """hook_turns.yaml: one key, ``hook_turns``, holding a list of entries (checked one by one)."""

    hook_turns: list[object]


class ModelPrice(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """budgets.yaml ``prices.<model>``: USD per million input (prompt) and output (completion) tokens."""

    input: Annotated[float, msgspec.Meta(ge=0)]
    output: Annotated[float, msgspec.Meta(ge=0)]


class BudgetLayer(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """budgets.yaml ``session``/``group``/``user``: what one key of the layer may spend per UTC day."""

    max: Annotated[float, msgspec.Meta(gt=0)]
    unit: Literal["usd", "tokens"] = "usd"
    warn_at: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.8


class BudgetsFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """budgets.yaml (workspace): the price table and the layers (each optional); docs/stages.md#budgets."""

    prices: dict[NonEmpty, ModelPrice] = {}
    session: BudgetLayer | None = None
    group: BudgetLayer | None = None
    user: BudgetLayer | None = None
    #: Each group's agents (by name): whose spending a group's book counts, besides the reader's own.
    groups: dict[Name, list[Name]] = {}


class AgentTimeouts(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """agent.yaml ``timeouts``: ``hook_secs``, the longest this agent's kernel waits for one handler."""

    hook_secs: Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT)] | None = None


class AgentFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """An agent YAML (``hookbus agent --config FILE``): agent_os's ``agent.yaml``, the fields this runner reads.

    ``hook_files``: rule files (docs/rules.md) for this agent alone, each a path relative to the YAML, or a
    bare stem naming a ``global: false`` file of the bus (as ``--rules`` takes them).
    """

    name: Name | None = None
    system: NonEmpty | None = None
    hook_files: list[NonEmpty] = []
    #: agent_os's ``timeouts``: ``hook_secs`` bounds every handler's wait (docs/middleware.md, Timeouts).
    timeouts: AgentTimeouts = AgentTimeouts()
