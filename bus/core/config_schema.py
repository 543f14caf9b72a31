"""hookbus's config files declared as types: each entry with its fields and their bounds.

Loaders parse the file (YAML, JSON), then :func:`bus.core.schema.convert` the
document to these types, so every problem names the file, the entry and the
field. Rules that need code (a stage name's grammar, duplicate names) stay in
the loaders.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
#: A name that is also a NATS subject token.
Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+$")]
#: One string or a list of them (``match: shell`` or ``match: [shell, write_file]``).
Strings = NonEmpty | list[NonEmpty]


#: How long a hook-turn waits for the model unless its entry says otherwise.
HOOK_TURN_TIMEOUT_S = 20.0


class HookTurn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of hook_turns.yaml: a middleware handler that asks a model."""

    name: Name
    stage: str
    prompt: Annotated[str, msgspec.Meta(pattern=r"\S")]
    match: Strings | msgspec.UnsetType = msgspec.UNSET  # absent: every call of the stage
    fail_closed: bool = False
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=30)] = HOOK_TURN_TIMEOUT_S
    before: Strings = []
    after: Strings = []
    model: NonEmpty | None = None


class HookTurnsFile(msgspec.Struct, forbid_unknown_fields=True):
    """hook_turns.yaml: one key, ``hook_turns``, holding a list of entries (checked one by one)."""

    hook_turns: list[object]


Seconds = Annotated[float, msgspec.Meta(ge=0)]


class Trigger(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of triggers.yaml: which events start a turn on which agent, and how often at most."""

    name: Name
    on: NonEmpty
    prompt: NonEmpty
    agent: Name
    filter: Any = None  # conditions: their grammar is checked by triggers.engine.filters
    cooldown_s: Seconds = 0.0
    debounce_s: Seconds = 0.0
    max_in_flight: Annotated[int, msgspec.Meta(ge=1)] = 1
    dedupe: str | None = None
    dedupe_window_s: Seconds = 3600.0
    turn_timeout_s: Seconds = 600.0
    enabled: bool = True


#: Every config type declared here.
CONFIGS: tuple[type[msgspec.Struct], ...] = (HookTurnsFile, HookTurn, Trigger)
