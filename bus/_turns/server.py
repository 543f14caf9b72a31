"""Turn requests: how a trigger (or anyone) asks an agent to start a turn.

Wire: a JSON object published on ``hookbus.turn.<agent>`` (see
docs/protocol.md), with a reply subject when the sender wants to know when the
turn ends. Agent replicas subscribe in the queue group ``hookbus-agent-<agent>``
so each turn starts once. Inside the turn handler the recursion depth is the
request's depth, so everything the turn emits carries it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import msgspec
import orjson

from bus._core import depth as _depth
from bus._core.clock import format_timestamp
from bus._core.depth import depth_problem
from bus._core.encoder import Encoder
from bus._core.schema import decode
from bus._core.subjects import TOKEN_RE, is_reply_inbox
from bus._runtime import genai_spans as _genai
from bus._runtime import tracing as _tracing
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.tasks import TaskSet
from bus._transport.port import TRANSPORT_FAILURES, Port, RawMessage
from bus._turns.errors import TurnRequestError
from bus._turns.schema import TurnRequestMsg, TurnResultMsg
from bus._turns.subjects import TURN_PREFIX, turn_queue
from bus._turns.subjects import turn_subject as turn_subject

log = logging.getLogger("hookbus.turns")

SUBJECT_PREFIX: Final = TURN_PREFIX
_ids = Encoder()


@dataclass(slots=True)
class TurnRequest:
    """Start a turn on ``agent`` with ``prompt``; ``event`` is what caused it, if anything."""

    agent: str
    prompt: str
    depth: int = 0
    trigger: str | None = None
    event: dict[str, Any] | None = None
    session_id: str | None = None
    id: str = field(default_factory=_ids.new_id)
    timestamp: str = ""
    #: The vouched NATS user that published ``event`` (its ``Event.publisher``), set by the trigger engine;
    #: only workers and the bus may publish turn requests, so the agent may key on it (budgets' user layer).
    publisher: str | None = None
    #: The run that spawned this one (``agent/turn``) and this run's depth in the process tree: given by the
    #: requester, else filled by ``Bus.request_turn`` from the turn it is called in (:func:`spawned`).
    parent: str | None = None
    spawn_depth: int = 0

    def __post_init__(self) -> None:
        if not TOKEN_RE.fullmatch(self.agent):
            raise TurnRequestError(f"agent name {self.agent!r} must match [A-Za-z0-9_-]+")
        if not self.timestamp:
            self.timestamp = format_timestamp(time.time_ns() // 1_000_000)

    @property
    def subject(self) -> str:
        return turn_subject(self.agent)

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))


#: What an agent replies when a turn it was asked for ends: the schema's type itself.
TurnResult = TurnResultMsg


def decode_turn_request(data: bytes) -> TurnRequest:
    """Decode a turn request (schema TurnRequestMsg), naming what is wrong if it is not one."""
    msg = decode(data, TurnRequestMsg, "turn request", TurnRequestError)
    # TurnRequest has the schema type's fields, one for one: only a missing timestamp becomes "now".
    return TurnRequest(**{**msgspec.structs.asdict(msg), "timestamp": msg.timestamp or ""})


#: The turn this task runs in, if any: (``agent/turn``, its spawn depth), inherited by the tasks it starts.
_current_run: ContextVar[tuple[str, int] | None] = ContextVar("hookbus_turn_run", default=None)


def spawned(request: TurnRequest) -> TurnRequest:
    """``request`` as a child of the turn this code runs in (its parent and depth + 1), unless it names a parent."""
    run = _current_run.get()
    if run is None or request.parent is not None:
        return request
    request.parent, request.spawn_depth = run[0], run[1] + 1
    return request


#: An agent's turn handler: returns the answer (or raises, and the turn failed).
TurnHandler = Callable[[TurnRequest], Awaitable[str | None]]


class TurnServer:
    """Receives turn requests for one agent and runs ``handler`` for each, bounded."""

    def __init__(self, bus: Port, agent: str, handler: TurnHandler, concurrency: int = 4) -> None:
        if not TOKEN_RE.fullmatch(agent):
            raise TurnRequestError(f"agent name {agent!r} must match [A-Za-z0-9_-]+")
        self.bus = bus
        self.agent = agent
        self.handler = handler
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: TaskSet[None] = TaskSet()
        self._bad = RateLimitedLog(log)
        self.started = 0
        self.rejected = 0

    async def start(self) -> TurnServer:
        await self.bus.subscribe_raw(turn_subject(self.agent), self._on_msg, queue=turn_queue(self.agent))
        await self.bus.flush()  # requests sent once serve_turns returns reach this server
        return self

    def _check(self, msg: RawMessage) -> TurnRequest | None:
        """The request in ``msg``, or None after dropping and counting what an honest sender never sends."""
        drop, problem = "malformed", None
        if len(msg.data) > self.bus.max_bytes:
            drop, problem = "oversize", f"{len(msg.data)} bytes, over the {self.bus.max_bytes}-byte limit"
        else:
            try:
                request = decode_turn_request(msg.data)
            except TurnRequestError as exc:
                problem = str(exc)
            else:
                if request.agent != self.agent:
                    problem = f"turn request for agent {request.agent!r} on the subject of {self.agent!r}"
                elif (problem := depth_problem(request.depth, self.bus.max_depth)) is not None:
                    drop = "depth"
                else:
                    return request
        self.rejected += 1
        self.bus.stats.dropped.add(drop)
        self._bad.warning("turn request refused on %r: %s; skipped", msg.subject, problem)
        return None

    async def _on_msg(self, msg: RawMessage) -> None:
        request = self._check(msg)
        if request is None:
            return
        await self._slots.acquire()
        token = _depth._current.set(request.depth)  # the turn runs at the request's depth
        run = _current_run.set((f"{self.agent}/{request.id}", request.spawn_depth))  # turns it requests: children
        try:
            task = asyncio.get_running_loop().create_task(self._run(request, msg.reply))
        finally:
            _current_run.reset(run)
            _depth._current.reset(token)
        self._tasks.keep(task)

    async def _run(self, request: TurnRequest, reply: str) -> None:
        self.started += 1
        try:
            # A span where this process traces, child of the span that emitted the triggering event.
            with _tracing.span(
                f"{_genai.INVOKE_AGENT} {self.agent}",
                parent=request.event.get("traceparent") if isinstance(request.event, dict) else None,
                attributes={
                    **_genai.agent_attributes(self.agent),
                    _tracing.ATTR_AGENT: self.agent,
                    _tracing.ATTR_TURN: request.id,
                    _tracing.ATTR_TRIGGER: request.trigger or "",
                },
                kind="CONSUMER",
            ):
                answer = await self.handler(request)
            result = TurnResult(request.id, self.agent, "completed", answer=answer)
        except Exception as exc:
            log.warning("turn %s on agent %s failed: %r", request.id, self.agent, exc)
            result = TurnResult(request.id, self.agent, "failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._slots.release()
        if is_reply_inbox(reply):  # never a subject the requester aims allow_responses at
            try:
                await self.bus.publish_raw(reply, msgspec.json.encode(result))
            except TRANSPORT_FAILURES:
                log.debug("could not report the end of turn %s", request.id)

    async def stop(self, timeout: float = 5.0) -> None:
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
