"""One announced instance of the record runner: a fixed set of record versions, answered as a module.

The runner announces (at most) two instances: the versions it serves, and the
drafts waiting for approval. The kernel calls only the instance that declares
the approved identity (the request subject carries a digest of the
declarations), so while an edit waits the old version keeps answering. A
draft's instance runs a record only once the trust store approves it (asked
again at call time), never before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bus._core import bag_keys
from bus._core.decisions import CONTINUE, Decision, HandlerDecision, reply_of
from bus._core.declaration import Declaration
from bus._core.middleware_schema import MiddlewareReply, MiddlewareRequest, ReactionMsg, RequestCtx
from bus._core.results import ChainRun
from bus._middleware.faults import Outcome, fault_decision
from bus._middleware.handler.module import _reaction
from bus._records.execute import RecordRun, run_record
from bus._records.record import Record
from bus._records.sandbox import RecordCtx, RecordHandler


@dataclass(frozen=True, slots=True)
class Entry:
    """One record version in an instance: its declaration and, once compiled, its handler."""

    record: Record
    decl: Declaration
    handler: RecordHandler | None  # None: a draft, compiled only if approved at call time
    identity: str = ""  # the declaration's, computed once (calls report it)

    def __post_init__(self) -> None:
        if not self.identity:
            object.__setattr__(self, "identity", self.decl.identity())


#: Asked for a draft at call time: its handler if approved and enabled, None if approved and disabled;
#: raises LookupError (with why) if it may not run.
Resolve = Callable[[Entry], Awaitable[RecordHandler | None]]
#: Told how each record call ended (the runner counts failures).
Report = Callable[[Entry, RecordRun], None]


class RecordSet:
    """What a ModuleServer serves (the ``Served`` protocol): one instance's record versions."""

    def __init__(
        self, module: str, entries: list[Entry], *, heartbeat: float, concurrency: int, resolve: Resolve, report: Report
    ) -> None:
        self.name = module
        self.heartbeat = heartbeat
        self.concurrency = concurrency
        self.entries = {entry.record.name: entry for entry in entries}
        self._resolve = resolve
        self._report = report

    @property
    def declarations(self) -> list[Declaration]:
        return [entry.decl for entry in self.entries.values()]

    @property
    def identities(self) -> frozenset[str]:
        return frozenset(entry.identity for entry in self.entries.values())

    async def answer(self, request: MiddlewareRequest, bus: Any = None) -> MiddlewareReply:
        """Run the named records in order; patches compose, a cancel ends the run (as a Module does)."""
        stage = request.stage
        names = request.handlers
        todo = [e.record.name for e in self.entries.values() if e.decl.stage == stage] if names is None else names
        run = ChainRun(stage, request.payload)
        reactions: list[ReactionMsg] = []
        inputs = request.ctx.inputs
        bag = dict(inputs) if isinstance(inputs, dict) else {}  # what earlier records of this run wrote too
        for name in todo:
            entry = self.entries.get(name)
            qualname = f"{self.name}.{name}"
            if entry is None or entry.decl.stage != stage:
                reactions.append(_reaction(qualname, Outcome.ABSENT, CONTINUE, 0.0, "not served here"))
                continue
            reaction, decision = await self._one(entry, run.payload, request.ctx, bag)
            reactions.append(reaction)
            if not run.take(decision, qualname):
                break
        return reply_of(run.decision(), reactions)

    async def _one(
        self, entry: Entry, payload: dict[str, Any], wire: RequestCtx, bag: dict[str, Any]
    ) -> tuple[ReactionMsg, HandlerDecision]:
        decl = entry.decl
        handler = entry.handler
        if handler is None:
            try:
                handler = await self._resolve(entry)
            except LookupError as exc:
                cause = str(exc)
                return _reaction(decl.qualname, Outcome.ABSENT, _fault(decl, cause), 0.0, cause), _fault(decl, cause)
            if handler is None:  # approved as disabled: skipped
                return _reaction(decl.qualname, Outcome.OK, CONTINUE, 0.0, "disabled"), CONTINUE
        ctx = record_ctx(decl, wire, bag, payload)
        ran = await run_record(handler, decl, payload, ctx)
        self._report(entry, ran)
        reaction = _reaction(decl.qualname, ran.outcome, ran.decision, ran.duration_ms, ran.cause)
        written = {key: value for key, value in ctx.outputs.items() if key in decl.outputs}
        if written and ran.outcome is Outcome.OK:  # only declared outputs, as a Module keeps them
            reaction.outputs = written
            bag.update(written)
        return reaction, ran.decision


def record_ctx(
    decl: Declaration, wire: RequestCtx, bag: dict[str, Any], payload: Mapping[str, Any] | None = None
) -> RecordCtx:
    """The call's context as a record sees it: the same fields a module's StageCtx carries, without a bus."""
    return RecordCtx.of_request(decl, wire, inputs=bag_keys.inputs(decl, bag, payload or {}))


def _fault(decl: Declaration, cause: str) -> Decision:
    return fault_decision(decl.fail_closed, decl.qualname, Outcome.ABSENT, cause)
