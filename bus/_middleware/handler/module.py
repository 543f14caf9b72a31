"""The handler side: a named set of stage handlers, declared and answered (served by :class:`bus._module.Module`).

``Handlers(name)`` collects handlers with ``@handlers.stage(...)`` and answers
the kernel's requests (:meth:`Handlers.answer`); it imports nothing above its
layer: the bus it hands its handlers is a :class:`HandlerBus`.
:class:`bus._module.Module` adds ``serve``: ``await module.serve(servers)`` announces the declarations in the registry
(see :mod:`bus._middleware.registry`) and its fail-closed handlers (:mod:`bus._middleware.guards`),
answers the kernel's requests on ``hookbus.mw.<name>.<version>`` in a queue
group (replicas of one version share the load) and runs until cancelled.
Requests are answered concurrently, up to ``concurrency`` at once (and as
many again for nested calls), so a slow call does not stall the others and
A -> B -> A re-entry does not deadlock.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol, TypeVar, cast, get_type_hints

import msgspec

from bus._core import bag_keys
from bus._core import depth as _depth
from bus._core.decisions import Ask, Cancel, Continue, Decision, HandlerDecision, Patch, ask_problem, reply_of
from bus._core.declaration import DEFAULT_TIMEOUT, Declaration, declare
from bus._core.errors import DeclarationError
from bus._core.middleware_schema import MiddlewareReply, MiddlewareRequest, ReactionMsg, RequestCtx
from bus._core.payloads import from_dict, is_typed, to_dict
from bus._core.results import ChainRun
from bus._core.run_context import CallCtx
from bus._core.schema import convert
from bus._core.subjects import TOKEN_RE
from bus._middleware.faults import Outcome, fault_decision
from bus._runtime import tracing as _tracing
from bus._runtime.eager import HandlerTimedOut, fault_cause, run_bounded
from bus._transport.port import Port

log = logging.getLogger("hookbus.module")

#: Requests one module process answers at once before it stops reading more.
DEFAULT_CONCURRENCY: Final = 64

#: A stage handler: ``async def h(stage, payload[, ctx])`` returning a decision.
StageHandler = Callable[..., Coroutine[Any, Any, HandlerDecision]]
F = TypeVar("F", bound=StageHandler)


class HandlerBus(Protocol):
    """The bus a handler is given (``ctx.bus``): a :class:`bus.Bus`, seen through what handlers call on it."""

    @property
    def port(self) -> Port: ...

    async def emit(
        self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None
    ) -> bool: ...

    async def intercept(
        self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None
    ) -> Decision: ...

    async def flush(self, timeout: float = 5.0) -> None: ...


@dataclass(frozen=True, slots=True)
class StageCtx(CallCtx):
    """What a handler may ask for (a parameter named ``ctx``): the call's context (its fields:
    :class:`bus._core.run_context.CallCtx`) and a bus. Emits and intercepts made through ``bus``
    inside the handler carry ``event_depth + 1`` (the depth rule of :mod:`bus._core.depth`).
    """

    bus: HandlerBus | None = None


@dataclass(frozen=True, slots=True)
class _Handler:
    decl: Declaration
    func: StageHandler
    wants_ctx: bool
    payload_type: type | None
    config: Mapping[str, Any] = field(default_factory=dict)


class Handlers:
    """A named set of stage handlers: one middleware module's declarations and the answers to its requests.

    ``heartbeat`` None (the default) serves it on protocol 2: announced once, re-put only when its connection
    comes back and before the registry's max age, so an idle fleet costs no registry traffic, and a kernel
    learns it is gone from the first call that meets no responders. A number of seconds (0.05 .. 60) serves it
    on protocol 1: re-put every heartbeat, so kernels drop it within three missed beats without a call.
    """

    def __init__(self, name: str, *, concurrency: int = DEFAULT_CONCURRENCY, heartbeat: float | None = None) -> None:
        if not isinstance(name, str) or not TOKEN_RE.fullmatch(name):
            raise DeclarationError(str(name), "a module name must match [A-Za-z0-9_-]+")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if heartbeat is not None and not 0.05 <= heartbeat <= 60:
            raise ValueError(f"heartbeat must be None or within 0.05..60 s, not {heartbeat}")
        self.name = name
        self.concurrency = concurrency
        self.heartbeat = heartbeat
        self._handlers: dict[str, _Handler] = {}
        self._by_stage: dict[str, list[_Handler]] = {}

    def stage(
        self,
        stage: str,
        *,
        fail_closed: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        before: str | Iterable[str] = (),
        after: str | Iterable[str] = (),
        match: str | Iterable[str] | None = None,
        name: str | None = None,
        code: str | None = None,
        priority: int = 0,
        when: Mapping[str, Any] | None = None,
        inputs: Iterable[str | Mapping[str, Any]] | None = None,
        outputs: str | Iterable[str] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Declare the decorated coroutine function as this module's handler of ``stage``.

        ``code`` stands for what the handler does when its Python code does not
        say it (a generic function driven by config, such as a prompt): its
        digest goes into the handler's identity instead of the bytecode's.
        ``priority`` (higher runs earlier) and ``when`` (``{agents, users,
        sessions, templates}``: glob patterns) compose it with other handlers.
        ``config`` is the handler's own settings, handed to it as ``ctx.config``
        (kept in this process: not announced, not part of its identity).
        """

        def register(func: F) -> F:
            handler_name = name or func.__name__
            if not inspect.iscoroutinefunction(cast(Any, func)):  # cast: keep func's type F unnarrowed
                raise DeclarationError(f"{self.name}.{handler_name}", "a stage handler must be an async def")
            if handler_name in self._handlers:
                raise DeclarationError(f"{self.name}.{handler_name}", "declared twice in this module (give name=)")
            decl = declare(
                self.name,
                handler_name,
                stage,
                fail_closed=fail_closed,
                timeout=timeout,
                before=before,
                after=after,
                match=match,
                priority=priority,
                when=when,
                inputs=inputs,
                outputs=outputs,
                code=hashlib.sha256(code.encode()).hexdigest()[:16] if code is not None else _code_digest(func),
            )
            wants_ctx = "ctx" in inspect.signature(func).parameters
            handler = _Handler(decl, func, wants_ctx, _payload_type(func), dict(config or {}))
            self._handlers[handler_name] = handler
            self._by_stage.setdefault(decl.stage, []).append(handler)
            return func

        return register

    def configure(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into every handler's ``ctx.config`` (``hookbus test-module --db PATH``: its db_path)."""
        for name, handler in self._handlers.items():
            changed = replace(handler, config={**handler.config, **values})
            self._handlers[name] = changed
            self._by_stage[changed.decl.stage] = [
                changed if h is handler else h for h in self._by_stage[changed.decl.stage]
            ]

    @property
    def declarations(self) -> list[Declaration]:
        """Every handler's declaration, in declaration order."""
        return [handler.decl for handler in self._handlers.values()]

    async def handle(self, request: Mapping[str, Any], bus: HandlerBus | None = None) -> dict[str, Any]:
        """Answer one request given as a wire object ``{stage, payload, ctx, handlers}``, with the wire reply.

        Usable without NATS, to test handlers; ValueError naming the field if
        ``request`` is not a request (docs/protocol.md, Request).
        """
        reply = await self.answer(convert(request, MiddlewareRequest, "request", ValueError), bus)
        wire: dict[str, Any] = msgspec.to_builtins(reply)
        return wire

    async def answer(self, request: MiddlewareRequest, bus: HandlerBus | None = None) -> MiddlewareReply:
        """Answer one request: run the named handlers in order (all of the stage's if it names none).

        Patches compose in that order, a cancel ends the run, faults read per
        each handler's fail mode; one reaction per handler run or skipped.
        """
        stage = request.stage
        names = request.handlers
        todo = [h.decl.name for h in self._by_stage.get(stage, [])] if names is None else names
        run = ChainRun(stage, request.payload)
        reactions: list[ReactionMsg] = []
        inputs = request.ctx.inputs
        bag = dict(inputs) if isinstance(inputs, dict) else {}  # what earlier handlers of this run wrote too
        for name in todo:
            handler = self._handlers.get(name)
            if handler is None or handler.decl.stage != stage:
                reactions.append(_reaction(f"{self.name}.{name}", Outcome.ABSENT, Continue(), 0.0, "not declared here"))
                continue
            reaction, decision = await self._run(handler, stage, run.payload, request.ctx, bus, bag)
            reactions.append(reaction)
            if not run.take(decision, reaction.handler):
                break
        return reply_of(run.decision(), reactions)

    async def _run(
        self,
        handler: _Handler,
        stage: str,
        payload: dict[str, Any],
        wire_ctx: RequestCtx,
        bus: HandlerBus | None,
        bag: dict[str, Any] | None = None,
    ) -> tuple[ReactionMsg, HandlerDecision]:
        decl = handler.decl
        outputs: dict[str, Any] = {}
        depth = wire_ctx.depth
        arg = from_dict(handler.payload_type, payload) if handler.payload_type else payload
        started = time.perf_counter()
        outer = _depth.current_depth()
        # The handler's depth, set for it and restored after it (it runs in this task and context).
        _depth.set_depth(_depth.child_depth(depth))
        span = (
            _tracing.span(
                f"hookbus handler {decl.qualname}",
                parent=wire_ctx.traceparent,
                attributes={_tracing.ATTR_STAGE: stage, _tracing.ATTR_HANDLER: decl.qualname},
                kind="SERVER",
            )
            if _tracing.active()
            else _tracing.NO_SPAN
        )
        traced = span.__enter__()
        try:
            # In a task of its own (bus._runtime.eager runs it inline until it waits): whatever it does to its
            # task (a timeout, a TaskGroup, a cancel of itself) stays with it; the request only waits.
            if handler.wants_ctx:
                inputs = bag_keys.inputs(decl, bag or {}, payload)
                coro = handler.func(stage, arg, ctx=_stage_ctx(handler, wire_ctx, bus, inputs, outputs))
            else:
                coro = handler.func(stage, arg)
            result = await run_bounded(coro, decl.timeout)
            outcome, cause = _check(result)
        except HandlerTimedOut:
            outcome, cause = Outcome.TIMEOUT, f"no answer within {decl.timeout:g}s"
        except Exception as exc:
            log.warning("handler %s raised on %s", decl.qualname, stage, exc_info=True)
            outcome, cause = Outcome.FAILED, fault_cause(exc)
        except BaseException:
            span.__exit__(None, None, None)  # cancelled: the span ends without an outcome
            raise
        finally:
            _depth.set_depth(outer)
        _tracing.note(traced, _tracing.ATTR_OUTCOME, outcome.value)
        span.__exit__(None, None, None)
        elapsed = (time.perf_counter() - started) * 1000
        if outcome is not Outcome.OK:
            result = fault_decision(decl.fail_closed, decl.qualname, outcome, cause or "")
        reaction = _reaction(decl.qualname, outcome, result, elapsed, cause)
        returned = getattr(result, "outputs", None)
        if isinstance(returned, Mapping):  # agent_os: a handler returns its outputs (or sets ctx.outputs)
            outputs.update(returned)
        if outputs and outcome is Outcome.OK:
            written = {key: value for key, value in outputs.items() if key in decl.outputs}
            if written:
                reaction.outputs = written
                if bag is not None:
                    bag.update(written)
        return reaction, result


def _check(result: object) -> tuple[Outcome, str | None]:
    """Whether a handler's return value is a valid decision, and why not."""
    if isinstance(result, Continue):
        return Outcome.OK, None
    if isinstance(result, Cancel):
        return (
            (Outcome.OK, None) if isinstance(result.reason, str) else (Outcome.INVALID, "cancel reason is not a string")
        )
    if isinstance(result, Patch):
        try:
            to_dict(result.payload)
        except TypeError as exc:
            return Outcome.INVALID, str(exc)
        return Outcome.OK, None
    if isinstance(result, Ask):
        problem = ask_problem(result)
        return (Outcome.OK, None) if problem is None else (Outcome.INVALID, problem)
    return Outcome.INVALID, f"returned {type(result).__name__}, not Continue/Cancel/Patch/Ask"


def _reaction(handler: str, outcome: Outcome, decision: HandlerDecision, ms: float, cause: str | None) -> ReactionMsg:
    """How one handler reacted, as the reply reports it (a cancel's or ask's reason with it)."""
    kind = decision.kind
    if isinstance(decision, Cancel | Ask):
        reason = decision.reason
        return ReactionMsg(
            handler=handler, outcome=outcome.value, decision=kind, reason=reason, duration_ms=ms, cause=cause
        )
    return ReactionMsg(handler=handler, outcome=outcome.value, decision=kind, duration_ms=ms, cause=cause)


def _stage_ctx(
    handler: _Handler, wire_ctx: RequestCtx, bus: HandlerBus | None, bag: Mapping[str, Any], outputs: dict[str, Any]
) -> StageCtx:
    return StageCtx.of_request(handler.decl, wire_ctx, bus=bus, inputs=bag, outputs=outputs, config=handler.config)


def _payload_type(func: StageHandler) -> type | None:
    """The typed payload class the handler's second parameter asks for, if any."""
    params = list(inspect.signature(func).parameters)
    if len(params) < 2:
        return None
    try:
        hint = get_type_hints(func).get(params[1])
    except Exception:  # unresolvable annotations: treat the payload as a dict
        return None
    return hint if is_typed(hint) else None


def _code_digest(func: StageHandler) -> str:
    """A digest of the handler's compiled code: a changed body is a changed handler."""
    return _digest_code(func.__code__)[:16]


def _digest_code(code: Any) -> str:
    """Hash bytecode, constants (nested code objects by their own digest) and names."""
    consts = [_digest_code(c) if inspect.iscode(c) else repr(c) for c in code.co_consts]
    raw = code.co_code + repr(consts).encode() + repr(code.co_names).encode()
    return hashlib.sha256(raw).hexdigest()
