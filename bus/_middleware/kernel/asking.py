"""Holding a call a handler asked about until an operator answers, or its deadline applies ``on_timeout``.

The kernel writes the pending ask to ``hookbus_asks`` (or finds the same
question's open ask again, after a restart), emits ``eva.ask.requested``,
waits, marks the ask done, and returns the answer as a plain decision:
allow is Continue, deny a Cancel naming the operator and the reason, edit a
Patch. Counted for Prometheus: asks held now and the age of the oldest,
answers by kind, asks expired.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from bus._core.decisions import ASK_TIMEOUT_MAX, CONTINUE, Ask, Cancel, Decision, Patch
from bus._core.errors import HookbusError
from bus._core.middleware_schema import RequestCtx
from bus._core.subjects import ASK_REQUESTED
from bus._middleware.asks.records import AnswerMsg, AskMsg, payload_sha256
from bus._middleware.asks.rules import AskRules
from bus._middleware.asks.store import AskStore
from bus._runtime.stats import PREFIX
from bus._transport.port import Port

log = logging.getLogger("hookbus.middleware")

#: Characters of a handler's reason an ask keeps (a module cannot fill the bucket with it).
REASON_LIMIT: Final = 1000
#: How a fail mode reads at an ask's deadline.
_FAIL_MODE: Final = {True: "cancel", False: "continue"}


@dataclass(frozen=True, slots=True)
class Asked:
    """``intercept(..., hold=False)``'s answer when a handler asked: wait with ``await bus.answer(id)``."""

    id: str  # "" for an ask not kept (the agent's own terminal answers it)
    deadline: float  # Unix time
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Held:
    """How one ask ended: the decision, and what the journal says of it."""

    ask: AskMsg
    decision: Decision
    verdict: str  # allowed | denied | edited | expired
    cause: str
    waited_s: float


class AskStats(Collector):
    """Process-wide ask counters: held now (and since when), answered by kind, expired."""

    def __init__(self) -> None:
        self.holding: dict[str, float] = {}  # ask id -> asked at (Unix time)
        self.answered: dict[str, int] = {}  # allow | deny | edit -> asks
        self.expired = 0

    def collect(self) -> Iterable[Any]:
        pending = GaugeMetricFamily(f"{PREFIX}_asks_pending", "Asks this process holds for an operator's answer")
        pending.add_metric([], len(self.holding))
        yield pending
        oldest = GaugeMetricFamily(f"{PREFIX}_asks_oldest_age_seconds", "Age of the oldest ask held (0: none)")
        oldest.add_metric([], time.time() - min(self.holding.values()) if self.holding else 0.0)
        yield oldest
        answered = CounterMetricFamily(f"{PREFIX}_asks_answered", "Asks answered, by kind", labels=["kind"])
        for kind, count in sorted(self.answered.items()):
            answered.add_metric([kind], count)
        yield answered
        expired = CounterMetricFamily(f"{PREFIX}_asks_expired", "Asks whose deadline came before any answer")
        expired.add_metric([], self.expired)
        yield expired


ASKS: Final = AskStats()


class AskHolder:
    """The asks of one kernel: hold each until its answer or deadline (a store opened on first use)."""

    def __init__(self, port: Port) -> None:
        self._port = port
        self._store: AskStore | None = None
        self._rules: AskRules | None = None

    @property
    def rules(self) -> AskRules:
        if self._rules is None:
            self._rules = AskRules(self._port)
        return self._rules

    @property
    def store(self) -> AskStore:
        if self._store is None:
            self._store = AskStore(self._port)
        return self._store

    async def hold(
        self,
        ask: Ask,
        handler: str,
        identity: str | None,
        fail_closed: bool,
        stage: str,
        payload: dict[str, Any],
        ctx: RequestCtx,
        on_asked: Callable[[AskMsg], None] | None = None,
    ) -> Held:
        """Write (or find again) the ask, wait for its answer, and read it as a decision."""
        now = time.time()
        store = self.store
        record = AskMsg(
            id="",
            user=store.user,
            stage=stage,
            payload=payload,
            payload_sha256=payload_sha256(payload),
            handler=handler,
            identity=identity,
            reason=ask.reason if len(ask.reason) <= REASON_LIMIT else ask.reason[:REASON_LIMIT] + "…",
            agent=ctx.agent,
            session=ctx.session,
            asked_at=now,
            deadline=now + min(float(ask.timeout), ASK_TIMEOUT_MAX),
            on_timeout=ask.on_timeout or _FAIL_MODE[fail_closed],  # type: ignore[arg-type]  # one of the two
            call_id=ctx.id,
        )
        try:
            rule = await self.rules.matching(record)
        except HookbusError as exc:  # no rule can be read: the ask is held as if none stood
            log.warning("could not read the standing rules for an ask of %s: %s", handler, exc)
            rule = None
        if rule is not None:
            ASKS.answered["rule"] = ASKS.answered.get("rule", 0) + 1
            cause = f"allow by rule {rule.id} ({rule.scope} {rule.scoped_to}, remembered by {rule.by})"
            return Held(record, CONTINUE, "allowed", cause, 0.0)
        try:
            record, again = await store.open(record)
        except HookbusError as exc:  # the store is unusable: the handler's fail mode, as for any fault
            log.warning("could not hold an ask of %s: %s", handler, exc)
            return _unheld(record, fail_closed, f"{handler} asked, but the ask could not be held: {exc}")
        if not again:
            await self._port.emit(ASK_REQUESTED, _event(record))
        if on_asked is not None:
            on_asked(record)
        ASKS.holding[record.id] = record.asked_at
        try:
            answer = await store.wait(record)
            await store.finish(record)
        except HookbusError as exc:
            log.warning("lost the ask %s of %s: %s", record.id, handler, exc)
            answer = None
        finally:
            ASKS.holding.pop(record.id, None)
        return _read(record, answer, again)


def _read(record: AskMsg, answer: AnswerMsg | None, again: bool) -> Held:
    waited = time.time() - record.asked_at
    if answer is None:
        ASKS.expired += 1
        found = "found again after a restart, " if again else ""
        cause = f"{found}nobody answered within {record.deadline - record.asked_at:g}s: {record.on_timeout}"
        if record.on_timeout == "cancel":
            return Held(record, Cancel(f"{record.handler} asked ({record.reason}): {cause}"), "expired", cause, waited)
        return Held(record, CONTINUE, "expired", cause, waited)
    ASKS.answered[answer.kind] = ASKS.answered.get(answer.kind, 0) + 1
    cause = f"{answer.kind} by {answer.by} after {waited:.1f}s"
    if answer.kind == "deny":
        why = answer.reason or "no reason given"
        return Held(record, Cancel(f"denied by {answer.by}: {why}"), "denied", f"{cause}: {why}", waited)
    if answer.kind == "edit":
        edited = answer.payload or {}
        return Held(record, Patch(edited), "edited", f"{cause}: payload {payload_sha256(edited)[:16]}…", waited)
    return Held(record, CONTINUE, "allowed", cause, waited)


def _unheld(record: AskMsg, fail_closed: bool, cause: str) -> Held:
    decision: Decision = Cancel(cause) if fail_closed else CONTINUE
    return Held(record, decision, "failed", cause, 0.0)


def _event(record: AskMsg) -> dict[str, Any]:
    """``eva.ask.requested``: who asks what, without the payload (operators read it from the bucket)."""
    return {
        "id": record.id,
        "stage": record.stage,
        "handler": record.handler,
        "reason": record.reason,
        "agent": record.agent,
        "session": record.session,
        "user": record.user,
        "payload_sha256": record.payload_sha256,
        "deadline": record.deadline,
        "on_timeout": record.on_timeout,
    }
