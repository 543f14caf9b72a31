"""The problems turn: a broken middleware chain asks an agent to fix the references of its records.

When ``eva.broken.set`` arrives for a stage, a turn starts on the configured
agent with a prompt naming the stage, the reason and the handler records of
that stage, asking it to fix their before/after references (with
``handler_list`` and ``handler_move``: the fix waits for an operator's
approval like every write of the agent). One problem per broken stage: while
it is open, further ``eva.broken.set`` for it start no turn unless the
cooldown has passed; ``eva.broken.cleared`` closes it. Replicas (every
``hookbus up``) share the events in one queue group, and every kernel reports
the same break, so the cooldown also absorbs the copies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

from bus._client import Bus
from bus._core.envelope import Event
from bus._core.errors import HookbusError, StageError
from bus._core.stages import validate_stage
from bus._core.subjects import BROKEN_CLEARED, BROKEN_SET, TOKEN_RE
from bus._journal.entries import JournalEntry, publish_entry
from bus._records.store import RecordStore
from bus._records.subjects import RECORDS_MODULE
from bus._service import ServiceContext
from bus._turns.server import TurnRequest
from triggers.engine._request import bounded, fit_request
from triggers.engine._subjects import PROBLEMS_QUEUE

log = logging.getLogger("hookbus.triggers")

#: The trigger's name in turn requests and the journal.
NAME: Final = "problems"
#: Characters of a reported reason kept in the prompt (a reason comes from the bus: bounded).
REASON_CHARS: Final = 1000


@dataclass(frozen=True, slots=True)
class ProblemsSettings:
    """Which agent gets the problems turn, how often per stage, whose records it names."""

    agent: str = "eva"
    cooldown_s: float = 300.0
    module: str = RECORDS_MODULE

    def __post_init__(self) -> None:
        if not TOKEN_RE.fullmatch(self.agent):
            raise ValueError(f"problems agent {self.agent!r} must match [A-Za-z0-9_-]+")
        if not self.cooldown_s >= 0:
            raise ValueError(f"problems cooldown must be a non-negative number of seconds, not {self.cooldown_s!r}")


@dataclass
class Problem:
    """One broken stage: its reason and when a turn was last started for it."""

    stage: str
    reason: str
    fired_at: float
    turns: list[str] = field(default_factory=list)


class ProblemsTrigger:
    """Starts a problems turn per broken stage; closes it when the stage works again."""

    def __init__(self, bus: Bus, settings: ProblemsSettings | None = None) -> None:
        self.bus = bus
        self.settings = settings or ProblemsSettings()
        self.store = RecordStore(bus.port, self.settings.module)
        self.open: dict[str, Problem] = {}
        self.closed: list[str] = []

    async def start(self) -> ProblemsTrigger:
        await self.bus.subscribe(BROKEN_SET, self._on_set, queue=PROBLEMS_QUEUE)
        await self.bus.subscribe(BROKEN_CLEARED, self._on_cleared, queue=PROBLEMS_QUEUE)
        await self.bus.flush()
        return self

    async def _on_set(self, event: Event) -> None:
        stage, reason = _stage_of(event), event.payload.get("reason")
        if stage is None or not isinstance(reason, str):
            log.warning("problems: %s without a valid stage and reason: ignored", event.subject)
            return
        now = time.monotonic()
        problem = self.open.get(stage)
        if problem is not None and now - problem.fired_at < self.settings.cooldown_s:
            problem.reason = bounded(reason, REASON_CHARS)
            return
        problem = self.open[stage] = Problem(
            stage, bounded(reason, REASON_CHARS), now, problem.turns if problem else []
        )
        request = TurnRequest(
            agent=self.settings.agent,
            prompt=await self._prompt(problem),
            depth=event.depth + 1,
            trigger=NAME,
            event=dict(event.to_dict()),
            session_id=event.session_id,
        )
        request = fit_request(request, self.bus.max_bytes)
        problem.turns.append(request.id)
        await self.bus.request_turn(request)
        await self._journal(stage, "fired", f"turn {request.id} on {self.settings.agent}: {problem.reason}")

    async def _on_cleared(self, event: Event) -> None:
        stage = _stage_of(event)
        if stage is None or self.open.pop(stage, None) is None:
            return
        self.closed.append(stage)
        await self._journal(stage, "cleared", "the chain works again")

    async def _prompt(self, problem: Problem) -> str:
        records = await self._records_of(problem.stage)
        named = ", ".join(records) if records else "none of your records"
        return (
            f"The middleware chain of stage {problem.stage} is broken: {problem.reason}. "
            f"Handler records on that stage: {named}. Fix their before/after references: see them with "
            "handler_list and rewrite them with handler_move (name handlers, never numbers). "
            "Your change waits for an operator's approval."
        )

    async def _records_of(self, stage: str) -> list[str]:
        try:
            stored = await self.store.all()
        except HookbusError as exc:
            log.warning("problems: the records could not be read (%s)", exc)
            return []
        module = self.settings.module
        return sorted(
            f"{module}.{name}"
            for name, rec in stored.items()
            if not isinstance(rec, HookbusError) and rec.stage == stage
        )

    async def _journal(self, stage: str, decision: str, cause: str) -> None:
        await publish_entry(self.bus.port, JournalEntry("trigger", stage, "fire", NAME, decision, cause=cause))


def _stage_of(event: Event) -> str | None:
    stage = event.payload.get("stage")
    try:
        return validate_stage(stage)
    except StageError:
        return None


@asynccontextmanager
async def service(ctx: ServiceContext, settings: ProblemsSettings | None = None) -> AsyncIterator[None]:
    """``hookbus up``: the problems turn, on by default."""
    trigger = await ProblemsTrigger(ctx.bus, settings).start()
    ctx.lines.append(
        f"  problems turn on {trigger.settings.agent} when a chain breaks (cooldown {trigger.settings.cooldown_s:g}s)"
    )
    yield
