"""triggers.yaml as types: each trigger with its fields and their bounds (the filter grammar is checked in
:mod:`triggers.engine._filters`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from bus._runtime.config_types import Name, NonEmpty, Seconds


class Trigger(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of triggers.yaml: which events start a turn on which agent, and how often at most."""

    name: Name
    on: NonEmpty
    prompt: NonEmpty
    agent: Name
    filter: Any = None  # conditions: their grammar is checked by triggers.engine._filters
    cooldown_s: Seconds = 0.0
    debounce_s: Seconds = 0.0
    max_in_flight: Annotated[int, msgspec.Meta(ge=1)] = 1
    dedupe: str | None = None
    dedupe_window_s: Seconds = 3600.0
    turn_timeout_s: Seconds = 600.0
    enabled: bool = True
    #: The NATS users whose events may fire it, as their subjects vouch (docs/triggers.md); ``"*"`` accepts any
    #: publisher, vouched or not. Unset: the target agent's own user, ``agent-<agent>``.
    publishers: list[Annotated[str, msgspec.Meta(pattern=r"^([A-Za-z0-9_-]+|\*)$")]] | None = None
