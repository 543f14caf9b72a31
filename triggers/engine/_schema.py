"""The trigger engine's status reply as a wire type (``hookbus triggers`` checks what it receives against it)."""

from __future__ import annotations

import msgspec

from bus._core.schema import NonNegative


class TriggerRow(msgspec.Struct, kw_only=True):
    """One trigger in a status reply: what it listens to, and what it has done."""

    name: str
    on: str
    agent: str
    enabled: bool
    fired: NonNegative
    last_fired: str | None
    in_flight: NonNegative
    suppressed: dict[str, NonNegative]


class TriggerStatusMsg(msgspec.Struct, kw_only=True):
    """The reply on ``hookbus.triggers.status``: each trigger of the engine that answered."""

    triggers: list[TriggerRow]
