"""The kernel side: run a stage's chain and return the composed decision.

``Interceptor.intercept`` looks the stage up in the live view (no network for
a stage nobody declared), then calls the chain's handlers in order: each sees
the payload as patched by those before it, a cancel ends the chain, faults
read per each handler's fail mode (:mod:`bus._middleware.faults`). Consecutive handlers
served by one module go in one request (the module answers its sub-chain).
A call a held guard wants (its module gone, or replaced and waiting for
approval) is cancelled at once, without a request. Whatever a module answers
is read through the kernel's own declarations: a hostile or odd reply yields
the fail mode, never an exception. Every reaction is journaled on
``hookbus.journal.middleware``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from bus._core import depth as _depth
from bus._core.decisions import CONTINUE, Ask, Cancel, Decision, HandlerDecision, Patch, read_reply
from bus._core.declaration import DEFAULT_TIMEOUT_CEILING
from bus._core.errors import Aborted, BusClosedError, DecisionError, MiddlewareError, NoResponders, RequestTimeout
from bus._core.middleware_schema import MiddlewareRequest, RequestCtx
from bus._core.results import ChainRun, hide_output
from bus._core.run_context import CLAIM_KEYS, put_claims
from bus._core.schema import encode
from bus._core.stages import Stage, match_field, phase
from bus._journal.entries import JournalEntry, JournalPublisher
from bus._middleware.faults import Outcome
from bus._middleware.kernel import bag as _bag
from bus._middleware.kernel.asking import Asked, AskHolder
from bus._middleware.kernel.chain import StageChain
from bus._middleware.kernel.drain import DEFAULT_BUDGET, Drain
from bus._middleware.kernel.held_stages import HeldStages
from bus._middleware.kernel.holding import ASKED, hold_for_operator
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.reactions import Reactions, answered, bounded, broken_chain, fault_of, faulted
from bus._middleware.kernel.ruling import RuleCall
from bus._middleware.kernel.view import View
from bus._middleware.registry import LIVENESS_FACTOR
from bus._middleware.rules.book import RuleBook
from bus._middleware.trust import Managed
from bus._runtime import tracing as _tracing
from bus._transport.port import Port
from bus._transport.requester import Requester

log = logging.getLogger("hookbus.middleware")

#: Seconds a request waits beyond the sum of its handlers' timeouts (the module enforces those).
REPLY_GRACE: Final = 0.5
#: How long closing a Bus waits for pending intercepts before it gives up on them.
DEFAULT_SHUTDOWN_CLAMP: Final = 2.0
_TOOL_STAGES: Final = frozenset({Stage.TOOL_CALL.value, Stage.TOOL_RESULT.value})
_EMPTY: Final[Mapping[str, Any]] = {}


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
    #: An instance unheard of for this many of its heartbeats (and confirmed by the registry) is gone.
    liveness_factor: float = LIVENESS_FACTOR
    #: What a bag belongs to: ``process`` (an agent run: the caller's process and session) or ``session``.
    bag_scope: str = "process"
    #: The operator's ceiling: seconds this kernel waits for one handler at most, whatever it declared.
    timeout_ceiling: float = DEFAULT_TIMEOUT_CEILING
    #: The agent's bound (agent.yaml ``timeouts.hook_secs``): at most the ceiling; None: the ceiling.
    hook_secs: float | None = None

    def handler_wait(self, declared: float) -> float:
        """Seconds this kernel waits for a handler that declared ``declared``: its own, within both bounds."""
        bound = self.timeout_ceiling if self.hook_secs is None else min(self.hook_secs, self.timeout_ceiling)
        return min(declared, bound)


class Interceptor:
    """The middleware chain runner of one Bus."""

    def __init__(
        self, bus: Port, *, managed: Managed, trust_new: bool, options: MiddlewareOptions, rules: RuleBook | None = None
    ) -> None:
        self._bus = bus
        self.rules = rules or RuleBook()
        self._managed = managed
        self._trust_new = trust_new
        self.options = options
        self._aliases = dict(options.tool_aliases)
        self._drain = (
            Drain(options.drain_dir, options.drain_budget) if options.drain_dir else Drain(budget=options.drain_budget)
        )
        self.view: View | None = None
        self._journal = JournalPublisher(bus)
        self._requester: Requester | None = None
        self._starting: asyncio.Future[None] | None = None
        self._closing = False
        self._typo_checked: dict[str, int] = {}  # undeclared stage -> view generation it was checked at
        self._typo_warned: dict[str, str] = {}  # undeclared stage -> the stage it was said to look like
        self._held = HeldStages(self._journal, options.journal_neutral, self._held_ctx)
        #: Each session's bag, cleared by the session's next user.message (bus._middleware.kernel.bag).
        self.bags = _bag.Bags(self.options.bag_scope)
        self.asks = AskHolder(bus)
        self._unheld: dict[str, asyncio.Task[Decision]] = {}  # ask id -> the run waiting for its answer

    @property
    def managed(self) -> frozenset[str]:
        """The handlers this kernel runs without approval (the operator's config)."""
        return self._managed.names

    @property
    def trust_new(self) -> bool:
        """Whether this kernel approves never-seen handlers on first sight (development)."""
        return self._trust_new

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
            requester = Requester(self._bus)
            await requester.start()
            view = View(
                self._bus,
                managed=self._managed,
                trust_new=self._trust_new,
                aliases=self._aliases,
                notify=self._notify,
                on_denied=self._denied_announcement,
                on_note=self._chain_note,
                liveness_factor=self.options.liveness_factor,
                rules=self.rules,
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
        if stage == _bag.TURN_START:  # a new user message: its run's bag starts empty
            session, process = (ctx.get("session"), ctx.get("process")) if ctx else (None, None)
            self.bags.clear(None if session is None else str(session), None if process is None else str(process))
        chain = view.chains.get(stage)
        if chain is None:
            if self._typo_checked.get(stage) != view.generation:
                self._typo_check(view, stage)
            return CONTINUE
        if chain.holds and _depth.current_depth() < self._bus.max_depth:
            held = self._held.call(chain, self._canonical(stage, payload), ctx or _EMPTY)
            if held is not None:
                return held
        if _tracing.active():
            return await self._traced(chain, payload, ctx or _EMPTY)
        return await self._run(chain, payload, ctx or _EMPTY)

    async def intercept_unheld(
        self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None, *, keep: bool = True
    ) -> Decision | Asked:
        """``intercept``, but a handler's ask returns Asked(id, deadline) at once; :meth:`answer` waits for it.

        The chain goes on in a task of its own: after the answer, the handlers after the asking one run on
        what was approved, and ``answer(id)`` returns the composed decision. ``keep=False``: the ask is not
        held for an operator at all (an agent whose own person answers, ``hookbus claude-hook --asks
        terminal``): Asked with no id and the handler's reason, and the chain ends there.
        """
        asked: asyncio.Future[Asked] = asyncio.get_running_loop().create_future()
        token = ASKED.set((asked, keep))
        try:
            task = asyncio.get_running_loop().create_task(self.intercept(stage, payload, ctx))
        finally:
            ASKED.reset(token)
        either: set[asyncio.Future[Any]] = {task, asked}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not asked.done():
            asked.cancel()
            return task.result()
        held = asked.result()
        if not held.id:
            await task  # ended at the ask, nothing held
            return held
        self._unheld[held.id] = task
        task.add_done_callback(lambda _: None)  # its result is retrieved by answer()
        return held

    async def answer(self, ask_id: str) -> Decision:
        """The decision of a call ``intercept_unheld`` returned Asked for, once its ask is answered or expired."""
        task = self._unheld.get(ask_id)
        if task is None:
            raise MiddlewareError(f"ask {ask_id} is not held by this process (or its answer was already taken)")
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._unheld.pop(ask_id, None)

    async def _traced(self, chain: StageChain, payload: dict[str, Any], ctx: Mapping[str, Any]) -> Decision:
        """``_run`` in a span of its own (child of the caller's current span), whose context the requests carry."""
        with _tracing.span(f"hookbus intercept {chain.stage}", attributes={_tracing.ATTR_STAGE: chain.stage}) as span:
            decision = await self._run(chain, payload, ctx)
            _tracing.note(span, _tracing.ATTR_DECISION, decision.kind)
            return decision

    def _typo_check(self, view: View, stage: str) -> None:
        """Warn once (per change of the view) about an undeclared stage that looks like a declared one."""
        if len(self._typo_checked) > 1000:  # bounded: stage names may come from anywhere
            self._typo_checked.clear()
            self._typo_warned.clear()
        self._typo_checked[stage] = view.generation
        likely = view.similar_stage(stage)
        if likely is not None and self._typo_warned.get(stage) != likely:
            self._typo_warned[stage] = likely
            log.warning("stage %r has no handler, but %r does: a typo? (the call continues)", stage, likely)

    async def _run(self, chain: StageChain, payload: dict[str, Any], ctx: Mapping[str, Any]) -> Decision:
        stage = chain.stage
        depth = _depth.current_depth()
        if depth >= self._bus.max_depth:
            return CONTINUE  # the recursion limit: nothing runs at or past it
        rid = self._bus.new_id()
        wire_ctx = _wire_ctx(ctx, depth, rid)
        journal = Reactions(self._journal, stage, wire_ctx, self.options.journal_neutral)
        run = ChainRun(stage, self._canonical(stage, payload))
        bag = self.bags.of(wire_ctx.session, _given(wire_ctx.process)) if chain.bag else None
        journal.sent(run.payload)
        for link in chain.waiting:
            if _wants(link, stage, run.payload) and (not link.scoped or link.in_scope(ctx)):
                journal.add(link, Outcome.UNTRUSTED, CONTINUE, 0.0, f"{link.trust.value}: not approved")
        if chain.broken:
            journal.flush()
            return broken_chain(chain, journal)
        # Matchers, grants and ``when`` are read here, before any request: a handler they exclude costs nothing.
        taking = chain.taking
        links = chain.links if taking is None else taking.taken(run.payload.get(match_field(stage)), ctx)
        index = 0
        rules = RuleCall(stage, wire_ctx, bag, chain.reads) if chain.rules else None
        while index < len(links):
            journal.sent(run.payload)  # what the next handlers are sent (a patch before made a new one)
            if rules is not None and links[index].rule is not None:  # evaluated here, a run of rules at once
                index, ruled = rules.sweep(links, index, run.payload, journal)
                if ruled is CONTINUE:
                    continue
                ruler = links[index - 1]
                if isinstance(ruled, Ask):  # held for an operator, as a handler's ask
                    ruled = await self._hold(ruled, ruler, run.payload, wire_ctx)
                if not run.take(ruled, ruler.decl.qualname):
                    break
                continue
            batch = _batch(links, index)
            index += len(batch)
            if bag is not None:  # a consumer starts its own request: the bag is current when it is asked
                lacking = _bag.missing(batch[0].decl, bag)
                if lacking is not None:
                    why = f"required input {lacking} is not in the bag"
                    skipped = fault_of(batch[0], Outcome.SKIPPED, why, 0.0, journal)
                    if not run.take(skipped, batch[0].decl.qualname):
                        break
                    index -= len(batch) - 1  # only the consumer is skipped: the rest of its run is asked next
                    continue
                values = _bag.inputs_for(batch, bag)
                wire_ctx.inputs = msgspec.UNSET if values is None else values
            shadow = batch[0].shadow
            if shadow:  # its entries name the payload it saw
                journal.seen = run.payload
            decision, who = await self._call(stage, batch, run.payload, wire_ctx, journal, bag)
            journal.result(decision)
            if shadow:  # journaled as would_*: never applied, never held for an operator
                decision = CONTINUE
            if isinstance(decision, Ask) and run.cancel is None:  # held until the answer; then the rest runs on it
                position = next((i for i, link in enumerate(links) if link.decl.qualname == who), index - 1)
                if decision.payload is not None:  # handlers before it in its module's run patched
                    run.payload, run.patched = decision.payload, True
                decision = await self._hold(decision, links[position], run.payload, wire_ctx)
                index = position + 1
            if not run.take(decision, who):
                break
        journal.flush()
        return self._final(run, rid)

    async def _hold(self, ask: Ask, link: Link, payload: dict[str, Any], wire_ctx: RequestCtx) -> Decision:
        """Hold the call for an operator (bus._middleware.kernel.holding)."""
        return await hold_for_operator(self.asks, self._journal, ask, link, payload, wire_ctx)

    def _held_ctx(self, ctx: Mapping[str, Any]) -> RequestCtx:
        return _wire_ctx(ctx, _depth.current_depth(), self._bus.new_id())

    def _canonical(self, stage: str, payload: dict[str, Any]) -> dict[str, Any]:
        """On tool stages, the payload with the tool's canonical name (one run per call, not per alias)."""
        if stage in _TOOL_STAGES and self._aliases:
            name = payload.get("name")
            canonical = self._aliases.get(name) if isinstance(name, str) else None
            if canonical is not None:
                return {**payload, "name": canonical}
        return payload

    async def _call(
        self,
        stage: str,
        batch: Sequence[Link],
        payload: dict[str, Any],
        wire_ctx: RequestCtx,
        journal: Reactions,
        bag: dict[str, Any] | None = None,
    ) -> tuple[HandlerDecision, str]:
        """One request for a run of handlers of one module; journal their reactions.

        Returns the run's decision (a cancel named by the kernel) and the handler it is attributed to.
        """
        assert self._requester is not None
        wait = self.options.handler_wait
        timeout = sum(wait(link.decl.timeout) for link in batch) + REPLY_GRACE
        wire_ctx.deadline = time.time() + timeout  # this request's (the journal does not read it)
        handlers = [link.decl.name for link in batch]
        data = encode(MiddlewareRequest(stage=stage, payload=payload, ctx=wire_ctx, handlers=handlers))
        started = time.perf_counter()
        subject = batch[0].subject
        limit = self._bus.max_payload
        if len(data) > limit:
            cause = f"request of {len(data)} bytes is over the server's max_payload ({limit})"
            return faulted(batch, Outcome.OVERSIZE, cause, started, journal)
        try:
            raw = await self._requester.request(subject, data, timeout)
        except NoResponders:
            if self.view is not None:  # absent at once: a held guard holds from the next call (no heartbeat needed)
                self.view.absent(subject)
            return faulted(batch, Outcome.ABSENT, "no responders: the module is not running", started, journal)
        except RequestTimeout:
            return faulted(batch, Outcome.TIMEOUT, f"no reply within {timeout:g}s", started, journal)
        except Aborted:
            return faulted(batch, Outcome.SHUTDOWN, "the bus closed while waiting", started, journal)
        try:
            reply, decision = read_reply(raw, subject)
            if bag is not None:
                _bag.take_outputs(batch, reply.reactions, bag)
        except DecisionError as exc:
            return faulted(
                batch, Outcome.INVALID, bounded(f"invalid reply: {exc}") or "invalid reply", started, journal
            )
        return answered(batch, reply, decision, started, journal)

    def _final(self, run: ChainRun, rid: str) -> Decision:
        if run.cancel is not None:
            handler = run.cancel.handler or "?"  # the kernel's own name for it (see _answered)
            reason = self._drained(run.cancel.reason, f"{rid}-{handler[:64]}-reason")
            hidden = hide_output(run.payload, reason, handler) if run.stage == Stage.TOOL_RESULT else None
            return Cancel(reason, handler, hidden)
        if run.patched:
            try:
                return Patch(self._drain.payload(run.payload, f"{rid}-patch"))
            except OSError as exc:  # the drain directory is unusable: the patch cannot be kept whole
                log.error("could not drain a patched payload (%r): the call is cancelled", exc)
                return Cancel(f"the patched payload is over the drain budget and could not be stored: {exc}")
        return CONTINUE

    def _drained(self, text: str, label: str) -> str:
        try:
            return self._drain.text(text, label)
        except OSError as exc:  # never let the drain directory turn a decision into an exception
            budget = self._drain.budget
            return f"{text[:budget]}…[hookbus: {len(text) - budget} characters cut; could not store them: {exc}]"

    def _denied_announcement(self, key: str, why: str) -> None:
        """Journal a registry entry refused for claiming another module's name (once per key)."""
        self._journal.add(
            [JournalEntry(kind="middleware", point="registry", phase="announce", who=key, decision="denied", cause=why)]
        )

    def _chain_note(self, stage: str, note: str) -> None:
        """Journal that a stage's order dropped its bag edges (once per change, as the view reports it)."""
        entry = JournalEntry(kind="middleware", point=stage, phase=phase(stage), who="*", decision="reordered")
        entry.cause = note
        self._journal.add([entry])

    def _notify(self, subject: str, payload: dict[str, Any]) -> None:
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
        self._held.close()
        await self._journal.drain()
        if view is not None:
            await view.stop()


_CLAIM_KEYS: Final = frozenset(CLAIM_KEYS)


def _wire_ctx(ctx: Mapping[str, Any], depth: int, rid: str) -> RequestCtx:
    """A request's ``ctx`` from the caller's: its session and agent (texts, or null), the depth, the call's id,
    and the user, template and process when the caller gave them."""
    session, agent = ctx.get("session"), ctx.get("agent")
    wire = RequestCtx(
        session=session if session is None or isinstance(session, str) else str(session),
        agent=agent if agent is None or isinstance(agent, str) else str(agent),
        depth=depth,
        id=rid,
    )
    user, template, process = ctx.get("user"), ctx.get("template"), ctx.get("process")
    if user is not None:
        wire.user = str(user)
    if template is not None:
        wire.template = str(template)
    if process is not None:
        wire.process = str(process)
    if ctx.keys() & _CLAIM_KEYS:  # the agent's run: parent, process-tree depth, tools, budget (bus._core.run_context)
        put_claims(ctx, wire)
    traceparent = _tracing.current_traceparent()  # None at once where the process does not trace
    if traceparent is not None:
        wire.traceparent = traceparent
    return wire


def _wants(link: Link, stage: str, payload: dict[str, Any]) -> bool:
    """Whether a handler's matcher takes this call.

    A match field that is not a string (a list, an object: what no honest
    agent sends) reaches every handler with a matcher: a guard is never
    skipped because of a shape it cannot compare.
    """
    if link.match is None:
        return True
    value = payload.get(match_field(stage))
    if value is None or isinstance(value, str):
        return value in link.match
    return True


def _batch(links: Sequence[Link], start: int) -> list[Link]:
    """The run of handlers from ``start`` that one module answers in one request."""
    first = links[start]
    batch = [first]
    if not first.batch or first.shadow:  # a handler in shadow is asked alone: nothing after it sees its patch
        return batch
    for link in links[start + 1 :]:
        if link.subject != first.subject or link.decl.inputs or link.shadow:  # a bag consumer asks on its own
            break
        batch.append(link)
    return batch


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not publish a middleware event: %r", task.exception())


def _given(value: str | msgspec.UnsetType) -> str | None:
    """A ctx field the caller may leave out: None when it did."""
    return None if isinstance(value, msgspec.UnsetType) else value
