"""The kernel side: run a stage's chain and return the composed decision.

``Interceptor.intercept`` looks the stage up in the live view (no network for
a stage nobody declared), then calls the chain's handlers in order: each sees
the payload as patched by those before it, a cancel ends the chain, faults
read per each handler's fail mode (:mod:`bus.faults`). Consecutive handlers
served by one module go in one request (the module answers its sub-chain).
Every reaction is journaled on ``hookbus.journal.middleware``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from bus import depth as _depth
from bus.decisions import CONTINUE, Cancel, Decision, Patch, from_wire
from bus.drain import DEFAULT_BUDGET, Drain
from bus.errors import BusClosedError, DecisionError
from bus.faults import Outcome, fault_decision
from bus.journal import JournalEntry, JournalSink
from bus.middleware_metrics import MIDDLEWARE
from bus.requester import Aborted, NoResponders, Requester, RequestTimeout
from bus.results import apply_patch, hide_output
from bus.stages import Stage, match_field, phase
from bus.subjects import BROKEN_CLEARED, BROKEN_SET
from bus.trust import Managed
from bus.view import Link, StageChain, View

if TYPE_CHECKING:
    from bus.client import Bus

log = logging.getLogger("hookbus.middleware")

#: Seconds a request waits beyond the sum of its handlers' timeouts (the module enforces those).
REPLY_GRACE: Final = 0.5
#: How long closing a Bus waits for pending intercepts before it gives up on them.
DEFAULT_SHUTDOWN_CLAMP: Final = 2.0
_TOOL_STAGES: Final = frozenset({Stage.TOOL_CALL.value, Stage.TOOL_RESULT.value})


@dataclass
class MiddlewareOptions:
    """Kernel-side middleware settings of a Bus."""

    #: Tool name aliases: alias -> canonical name (matchers and handlers see the canonical one).
    tool_aliases: Mapping[str, str] = field(default_factory=dict)
    drain_dir: Path | None = None
    drain_budget: int = DEFAULT_BUDGET
    shutdown_clamp: float = DEFAULT_SHUTDOWN_CLAMP
    #: Journal reactions that let the action pass unchanged too (off: a neutral continue writes nothing).
    journal_neutral: bool = False


class Interceptor:
    """The middleware chain runner of one Bus."""

    def __init__(self, bus: Bus, *, managed: Managed, trust_new: bool, options: MiddlewareOptions) -> None:
        self._bus = bus
        self._managed = managed
        self._trust_new = trust_new
        self.options = options
        self._aliases = dict(options.tool_aliases)
        self._drain = (
            Drain(options.drain_dir, options.drain_budget) if options.drain_dir else Drain(budget=options.drain_budget)
        )
        self.view: View | None = None
        self._journal = JournalSink(bus)
        self._requester: Requester | None = None
        self._starting: asyncio.Future[None] | None = None
        self._closing = False

    async def start(self) -> View:
        """Load the registry and start following it (done by the first intercept if not before)."""
        if self.view is not None:
            return self.view
        if self._starting is not None:
            await asyncio.shield(self._starting)
            assert self.view is not None
            return self.view
        self._starting = asyncio.get_running_loop().create_future()
        try:
            nc = self._bus.nc
            requester = Requester(nc, self._bus.push)
            await requester.start()
            view = View(
                nc, managed=self._managed, trust_new=self._trust_new, aliases=self._aliases, on_broken=self._broken
            )
            await view.start()
        except BaseException as exc:
            self._starting.set_exception(exc)
            self._starting.exception()  # retrieved: the waiting callers re-raise it themselves
            self._starting = None
            raise
        self._requester, self.view = requester, view
        self._starting.set_result(None)
        return view

    async def intercept(self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None) -> Decision:
        view = self.view
        if view is None or self._closing:
            if self._closing:
                raise BusClosedError("intercept on a closed Bus")
            view = await self.start()
        chain = view.chains.get(stage)
        if chain is None:
            return CONTINUE
        return await self._run(chain, payload, ctx or {})

    async def _run(self, chain: StageChain, payload: dict[str, Any], ctx: Mapping[str, Any]) -> Decision:
        stage = chain.stage
        depth = _depth.current_depth()
        rid = self._bus.new_id()
        wire_ctx = {
            "session": ctx.get("session"),
            "agent": ctx.get("agent"),
            "depth": depth,
            "id": rid,
        }
        journal = _Journal(self._journal, stage, wire_ctx, self.options.journal_neutral)
        if depth >= self._bus.max_depth:
            return CONTINUE  # the recursion limit: nothing runs at or past it
        if chain.broken:
            journal.add(None, Outcome.BROKEN, CONTINUE, 0.0, chain.broken)
            journal.flush()
            return CONTINUE
        current = self._canonical(stage, payload)
        links = [link for link in chain.links if _wants(link, stage, current)]
        patched = False
        decision: Decision = CONTINUE
        index = 0
        while index < len(links):
            link = links[index]
            if not link.trust.runs:
                journal.add(link, Outcome.UNTRUSTED, CONTINUE, 0.0, f"{link.trust.value}: not approved")
                index += 1
                continue
            batch = _batch(links, index)
            index += len(batch)
            decision = await self._call(stage, batch, current, wire_ctx, journal)
            if isinstance(decision, Cancel):
                break
            if isinstance(decision, Patch):
                current, patched = decision.payload, True
        journal.flush()
        return self._final(stage, decision, current, patched, rid)

    def _canonical(self, stage: str, payload: dict[str, Any]) -> dict[str, Any]:
        """On tool stages, the payload with the tool's canonical name (one run per call, not per alias)."""
        if stage in _TOOL_STAGES and self._aliases:
            name = payload.get("name")
            canonical = self._aliases.get(name) if isinstance(name, str) else None
            if canonical is not None:
                return {**payload, "name": canonical}
        return payload

    async def _call(
        self, stage: str, batch: Sequence[Link], payload: dict[str, Any], wire_ctx: dict[str, Any], journal: _Journal
    ) -> Decision:
        """One request for a run of handlers of one module; journal their reactions."""
        assert self._requester is not None
        timeout = sum(link.decl.timeout for link in batch) + REPLY_GRACE
        request = {
            "stage": stage,
            "payload": payload,
            "ctx": {**wire_ctx, "deadline": time.time() + timeout},
            "handlers": [link.decl.name for link in batch],
        }
        started = time.perf_counter()
        subject = batch[0].subject
        data = orjson.dumps(request)
        limit = self._bus.nc.max_payload
        if len(data) > limit:
            cause = f"request of {len(data)} bytes is over the server's max_payload ({limit})"
            return _faulted(batch, Outcome.OVERSIZE, cause, started, journal)
        try:
            raw = await self._requester.request(subject, data, timeout)
        except NoResponders:
            return _faulted(batch, Outcome.ABSENT, "no responders: the module is not running", started, journal)
        except RequestTimeout:
            return _faulted(batch, Outcome.TIMEOUT, f"no reply within {timeout:g}s", started, journal)
        except Aborted:
            return _faulted(batch, Outcome.SHUTDOWN, "the bus closed while waiting", started, journal)
        try:
            reply = orjson.loads(raw)
            decision = from_wire(reply, subject)
        except (orjson.JSONDecodeError, DecisionError) as exc:
            return _faulted(batch, Outcome.INVALID, f"invalid reply: {exc}", started, journal)
        return _answered(stage, batch, reply, decision, started, journal)

    def _final(self, stage: str, decision: Decision, current: dict[str, Any], patched: bool, rid: str) -> Decision:
        drain = self._drain
        if isinstance(decision, Cancel):
            handler = decision.handler or "?"
            reason = drain.text(decision.reason, f"{rid}-{handler}-reason")
            hidden = hide_output(current, reason, handler) if stage == Stage.TOOL_RESULT else None
            return Cancel(reason, handler, hidden)
        if patched:
            return Patch(drain.payload(current, f"{rid}-patch"))
        return CONTINUE

    def _broken(self, stage: str, reason: str | None) -> None:
        subject, payload = (
            (BROKEN_SET, {"stage": stage, "reason": reason}) if reason else (BROKEN_CLEARED, {"stage": stage})
        )
        task = asyncio.get_running_loop().create_task(self._bus.emit(subject, payload))
        task.add_done_callback(_log_failure)

    async def close(self) -> None:
        """Give pending intercepts up to the shutdown clamp, then end them (fail mode applies) and stop."""
        self._closing = True
        requester, view = self._requester, self.view
        if requester is not None and requester.pending:
            clamp = self.options.shutdown_clamp
            await requester.wait_idle(clamp)
            aborted = requester.abort_all()
            if aborted:
                log.warning("%d intercepts still waiting after the %.1fs shutdown clamp: ended", aborted, clamp)
                await asyncio.sleep(0)  # let them journal and return
        await self._journal.drain()
        if view is not None:
            await view.stop()


def _wants(link: Link, stage: str, payload: dict[str, Any]) -> bool:
    if link.match is None:
        return True
    return payload.get(match_field(stage)) in link.match


def _batch(links: Sequence[Link], start: int) -> list[Link]:
    """The run of runnable handlers from ``start`` that one module answers in one request."""
    first = links[start]
    batch = [first]
    if not first.batch:
        return batch
    for link in links[start + 1 :]:
        if link.subject != first.subject or not link.trust.runs:
            break
        batch.append(link)
    return batch


def _faulted(batch: Sequence[Link], outcome: Outcome, cause: str, started: float, journal: _Journal) -> Decision:
    """Every handler of a failed request reads per its own fail mode, in order."""
    elapsed = (time.perf_counter() - started) * 1000
    for link in batch:
        decl = link.decl
        decision = fault_decision(decl.fail_closed, decl.qualname, outcome, cause)
        journal.add(link, outcome, decision, elapsed, cause)
        if isinstance(decision, Cancel):
            return decision
    return CONTINUE


def _answered(
    stage: str, batch: Sequence[Link], reply: dict[str, Any], decision: Decision, started: float, journal: _Journal
) -> Decision:
    reactions = reply.get("reactions")
    first = batch[0].decl.qualname
    if isinstance(reactions, list) and reactions:
        for item in reactions:
            if isinstance(item, dict):
                journal.add_wire(item, batch)
    else:
        journal.add(batch[0], Outcome.OK, decision, (time.perf_counter() - started) * 1000, None)
    if isinstance(decision, Cancel):
        return Cancel(decision.reason, decision.handler or first)
    if isinstance(decision, Patch):
        return Patch(apply_patch(stage, decision.payload, first))
    return decision


class _Journal:
    """Collects one call's reactions as shared-journal entries (kind ``middleware``), in chain order."""

    def __init__(self, sink: JournalSink, stage: str, wire_ctx: dict[str, Any], neutral: bool) -> None:
        self._sink = sink
        self._neutral = neutral
        self._stage = stage
        self._phase = phase(stage)
        self._ctx = wire_ctx
        self._entries: list[JournalEntry] = []

    def add(
        self, link: Link | None, outcome: Outcome, decision: Decision, duration_ms: float, cause: str | None
    ) -> None:
        reason = decision.reason if isinstance(decision, Cancel) else None
        self._add(
            link.decl.qualname if link else "*",
            link.identity if link else None,
            outcome.value,
            decision.kind,
            reason,
            cause,
            duration_ms,
        )

    def add_wire(self, item: dict[str, Any], batch: Sequence[Link]) -> None:
        """A reaction as the module reported it."""
        who = str(item.get("handler"))
        identity = next((link.identity for link in batch if link.decl.qualname == who), None)
        reason = item.get("reason")
        self._add(
            who,
            identity,
            str(item.get("outcome", "ok")),
            str(item.get("decision", "?")),
            reason if isinstance(reason, str) else None,
            item.get("cause"),
            item.get("duration_ms"),
        )

    def _add(
        self, who: str, identity: str | None, outcome: str, kind: str, reason: str | None, cause: Any, ms: Any
    ) -> None:
        if outcome == Outcome.OK:
            verdict, why = kind, reason
        elif outcome == Outcome.UNTRUSTED:
            verdict, why = "denied", cause
        else:  # a fault: the outcome, and what it read as
            verdict = outcome
            why = f"{cause}; read as {kind} ({'fail-closed' if kind == 'cancel' else 'fail-open'})"
            if outcome == Outcome.BROKEN:
                why = cause
        seconds = float(ms) / 1000 if isinstance(ms, int | float) else None
        MIDDLEWARE.observe(who, self._stage, outcome, kind, seconds)
        if verdict == "continue" and not self._neutral:
            return  # a neutral continue changes nothing: counted, not journaled
        ctx = self._ctx
        self._entries.append(
            JournalEntry(
                kind="middleware",
                point=self._stage,
                phase=self._phase,
                who=who,
                decision=verdict,
                cause=why if isinstance(why, str) else None,
                duration_ms=float(ms) if isinstance(ms, int | float) else None,
                session=ctx["session"],
                agent=ctx["agent"],
                depth=ctx["depth"],
                trace_id=ctx["id"],
                identity=identity,
            )
        )

    def flush(self) -> None:
        if self._entries:
            self._sink.add(self._entries)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not publish a broken-chain event: %r", task.exception())
