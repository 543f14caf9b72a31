"""Turn requests and results as wire types."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from bus._core.middleware_schema import SpawnDepth
from bus._core.schema import NonNegative


class TurnRequestMsg(msgspec.Struct, kw_only=True):
    """On ``hookbus.turn.<agent>``: start a turn on ``agent`` with ``prompt``."""

    agent: str
    prompt: str
    id: str
    depth: NonNegative = 0
    trigger: str | None = None
    event: dict[str, Any] | None = None
    session_id: str | None = None
    timestamp: str | None = None
    #: The vouched publisher of ``event`` (docs/protocol.md, Publisher identity); None: unvouched or no event.
    publisher: str | None = None
    #: The run that spawned this one (``agent/turn``) and this run's depth in the process tree (claims).
    parent: str | None = None
    spawn_depth: SpawnDepth = 0


class TurnResultMsg(msgspec.Struct):
    """The reply to a turn request, when the turn ends (``bus.TurnResult``)."""

    id: str
    agent: str
    status: Literal["completed", "failed"]
    answer: str | None = None
    error: str | None = None
