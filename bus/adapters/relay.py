"""The agent-hook relay ``hookbus up`` runs: hook inputs on ``hookbus.adapter.<flavor>`` answered with their mapping.

A hook command (``hookbus claude-hook``, ``codex-hook``) is a process per
hook call: opening a full client, reading the middleware registry and running
the chain itself would cost it many times the call. It sends the hook input
in one request over a plain socket instead, and this relay, whose view of the
registry is always loaded, runs the mapping of :mod:`bus.adapters.claude_code`
and answers what the command prints and its exit code. Replicas share the
requests in one queue group. Requests are checked as hostile: a malformed one
is answered with an ``error`` naming the field, never run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from bus.adapters.claude_code import ClaudeCodeDialect, answer, fail_closed_guards, parse
from bus.adapters.codex import CodexDialect
from bus.core.depth import set_depth
from bus.core.errors import AgentHookError, HookbusError
from bus.core.ratelog import RateLimitedLog
from bus.core.schema import AdapterReplyMsg, AdapterRequestMsg, decode, encode
from bus.core.subjects import ADAPTER_PREFIX, ADAPTER_QUEUE, adapter_subject, is_reply_inbox
from bus.core.tasks import TaskSet
from bus.transport.port import unsubscribe_all

if TYPE_CHECKING:
    from bus.client import Bus
    from bus.service import ServiceContext
    from bus.transport.port import RawMessage, RawSubscription

log = logging.getLogger("hookbus.adapters")
_refused = RateLimitedLog(log)

#: Requests answered at once; more wait in the subscription (a hook waits for its answer anyway).
MAX_CONCURRENT: Final = 64
DIALECTS: Final = (ClaudeCodeDialect(), CodexDialect())


async def reply_to(bus: Bus, dialect: ClaudeCodeDialect, data: bytes) -> AdapterReplyMsg:
    """The answer to one relayed request (an ``error`` reply for one that is malformed or fails)."""
    try:
        request = decode(data, AdapterRequestMsg, "adapter request", AgentHookError)
        hook = parse(request.input)
        set_depth(request.depth)  # this task's intercept and events carry the hook command's depth
        done = await answer(bus, hook, dialect)
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
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)
        self._subs: list[RawSubscription] = []

    async def start(self) -> None:
        await self._bus.middleware.start()  # the view is loaded before the first hook waits on it
        for dialect in DIALECTS:
            subject = adapter_subject(dialect.name)

            async def on_request(msg: RawMessage, dialect: ClaudeCodeDialect = dialect) -> None:
                if is_reply_inbox(msg.reply):
                    await self._slots.acquire()
                    self._tasks.start(self._serve(dialect, msg.data, msg.reply))
                elif msg.reply:  # aimed at a subject only the bus may write: never run, never answered
                    self._bus.stats.dropped.add("malformed")
                    _refused.warning("agent hook relay: reply subject %r is not an inbox; refused", msg.reply[:200])

            self._subs.append(await self._bus.subscribe_raw(subject, on_request, queue=ADAPTER_QUEUE))

    async def _serve(self, dialect: ClaudeCodeDialect, data: bytes, reply: str) -> None:
        try:
            body = encode(await reply_to(self._bus, dialect, data))
            await self._bus.publish_raw(reply, body)
        except HookbusError as exc:
            log.warning("agent hook relay: no answer sent: %s", exc)
        finally:
            self._slots.release()

    async def stop(self) -> None:
        await unsubscribe_all(self._subs)
        await self._tasks.cancel_all()


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """The relay as a service of ``hookbus up``."""
    relay = Relay(ctx.bus)
    await relay.start()
    ctx.lines.append(f"  agents   claude-hook and codex-hook relay on {ADAPTER_PREFIX}.<flavor>")
    try:
        yield
    finally:
        await relay.stop()
