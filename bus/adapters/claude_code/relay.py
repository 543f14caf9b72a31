"""The agent-hook relay ``hookbus up`` runs: hook inputs on ``hookbus.adapter.<flavor>.<user>`` answered.

A hook command (``hookbus claude-hook``, ``codex-hook``) is a process per
hook call: opening a full client, reading the middleware registry and running
the chain itself would cost it many times the call. It sends the hook input
in one request over a plain socket instead, and this relay, whose view of the
registry is always loaded, runs the mapping of :mod:`bus.adapters.claude_code._mapping`
and answers what the command prints and its exit code. Replicas share the
requests in one queue group. Requests are checked as hostile: a malformed one
is answered with an ``error`` naming the field, never run. The asker is the
user its subject names (the shipped permissions let each agent ask only under
its own): its intercepts carry it as the context's ``process`` (journaled),
and it holds at most PER_USER of the slots (:mod:`bus.adapters.claude_code._fair_slots`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from bus._core.depth import set_depth
from bus._core.errors import HookbusError
from bus._core.schema import decode, encode
from bus._core.subjects import is_reply_inbox
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.tasks import TaskSet
from bus._transport.port import unsubscribe_all
from bus.adapters._errors import AgentHookError
from bus.adapters._schema import AdapterReplyMsg, AdapterRequestMsg
from bus.adapters._subjects import ADAPTER_PREFIX, ADAPTER_QUEUE, adapter_asker, adapter_subject
from bus.adapters.claude_code._codex import CodexDialect
from bus.adapters.claude_code._fair_slots import ANONYMOUS, FairSlots
from bus.adapters.claude_code._gemini import GeminiDialect
from bus.adapters.claude_code._mapping import ClaudeCodeDialect, answer, fail_closed_guards, parse

if TYPE_CHECKING:
    from bus._client import Bus
    from bus._service import ServiceContext
    from bus._transport.port import RawMessage, RawSubscription

log = logging.getLogger("hookbus.adapters")
_refused = RateLimitedLog(log)

#: Requests answered at once; more wait their asker's turn (a hook waits for its answer anyway).
MAX_CONCURRENT: Final = 64
#: Requests of one asker answered at once: a flood from one agent leaves the other slots to the others.
PER_USER: Final = 8
#: Requests waiting for a slot, per asker and in all; one more is answered with an error at once.
WAITING_PER_USER: Final = 256
WAITING_TOTAL: Final = 4096
DIALECTS: Final = (ClaudeCodeDialect(), CodexDialect(), GeminiDialect())


async def reply_to(bus: Bus, dialect: ClaudeCodeDialect, data: bytes, asker: str | None = None) -> AdapterReplyMsg:
    """The answer to one relayed request of ``asker`` (an ``error`` reply for one that is malformed or fails)."""
    try:
        request = decode(data, AdapterRequestMsg, "adapter request", AgentHookError)
        hook = parse(request.input)
        set_depth(request.depth)  # this task's intercept and events carry the hook command's depth
        done = await answer(bus, hook, dialect, asker=asker, asks=request.asks)
    except AgentHookError as exc:
        return AdapterReplyMsg(error=str(exc))
    except HookbusError as exc:
        log.warning("agent hook relay: %s", exc)
        return AdapterReplyMsg(error=f"request failed: {exc}")
    return AdapterReplyMsg(
        exit_code=done.exit_code, output=done.output, stderr=done.stderr, fail_closed=fail_closed_guards(bus)
    )


class Relay:
    """Serves every dialect's subject on ``bus`` while started; each request in a task of its own, bounded."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._tasks: TaskSet[None] = TaskSet()
        self._slots = FairSlots(MAX_CONCURRENT, PER_USER, WAITING_PER_USER, WAITING_TOTAL)
        self._subs: list[RawSubscription] = []

    async def start(self) -> None:
        await self._bus.middleware.start()  # the view is loaded before the first hook waits on it
        for dialect in DIALECTS:
            subject = adapter_subject(dialect.name)

            async def on_request(msg: RawMessage, dialect: ClaudeCodeDialect = dialect) -> None:
                if is_reply_inbox(msg.reply):
                    self._admit(dialect, msg)
                elif msg.reply:  # aimed at a subject only the bus may write: never run, never answered
                    self._bus.stats.dropped.add("malformed")
                    _refused.warning("agent hook relay: reply subject %r is not an inbox; refused", msg.reply[:200])

            for served in (subject, f"{subject}.>"):
                self._subs.append(await self._bus.port.subscribe_raw(served, on_request, queue=ADAPTER_QUEUE))

    def _admit(self, dialect: ClaudeCodeDialect, msg: RawMessage) -> None:
        """Start ``msg``'s answer in its asker's share of the slots, or refuse it at once when too many wait."""
        asker = adapter_asker(msg.subject, dialect.name)
        user, data, reply = asker or ANONYMOUS, msg.data, msg.reply
        refused = self._slots.offer(user, lambda: self._tasks.start(self._serve(dialect, data, reply, asker)))
        if refused is not None:
            _refused.warning("agent hook relay: %s", refused)
            self._tasks.start(self._answer(reply, AdapterReplyMsg(error=f"the relay is busy: {refused}")))

    async def _serve(self, dialect: ClaudeCodeDialect, data: bytes, reply: str, asker: str | None) -> None:
        try:
            await self._answer(reply, await reply_to(self._bus, dialect, data, asker))
        finally:
            self._slots.release(asker or ANONYMOUS)

    async def _answer(self, reply: str, answer: AdapterReplyMsg) -> None:
        try:
            await self._bus.port.publish_raw(reply, encode(answer))
        except HookbusError as exc:
            log.warning("agent hook relay: no answer sent: %s", exc)

    async def stop(self) -> None:
        await unsubscribe_all(self._subs)
        await self._tasks.cancel_all()


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """The relay as a service of ``hookbus up``."""
    relay = Relay(ctx.bus)
    await relay.start()
    ctx.lines.append(f"  agents   claude-hook, codex-hook and gemini-hook relay on {ADAPTER_PREFIX}.<flavor>.<user>")
    try:
        yield
    finally:
        await relay.stop()
