"""The demo's trouble: what goes wrong in a real fleet, played once, so that every panel has moved.

``hookbus demo --for`` plays it beside the sessions:

- a broken emitter publishes an event that is not JSON (every receiver refuses it: ``malformed``);
- the edge agent, whose claim-check limit is small, emits a tool output too large to keep (cut to fit);
- the edge agent's link drops once (its own TCP relay cuts it) and it reconnects;
- a provider outage: a burst of errors overflows the pager hook's queue (shed);
- two force pushes ask an operator: the demo's operator allows the first, the second expires.

The misplaced shell hook, refused at each run, is in :mod:`triggers._demo_hooks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final
from urllib.parse import urlsplit

from bus._client import Bus
from bus._core.errors import HookbusError
from bus._middleware.asks.store import AskStore
from bus._runtime.tasks import TaskSet

log = logging.getLogger("hookbus.demo")

#: The agent at the edge of the network: a flaky link, a small claim-check limit.
EDGE_AGENT: Final = "agent-edge"
#: The edge agent's limits (bytes): its events and its claim checks are small on a metered link, so its
#: large tool outputs are cut to fit.
EDGE_MAX_BYTES: Final = 2048
EDGE_MAX_OBJECT_BYTES: Final = 1024
#: Errors in the outage burst: more than the pager's processes and queue hold (triggers._demo_hooks).
OUTAGE_ERRORS: Final = 40
#: Seconds a force push waits for the operator; the second one is left to expire.
ASK_TIMEOUT_S: Final = 3.0
OPERATOR: Final = "demo-operator"

#: Plays one tool call of an agent through the guard: (session, command, agent).
ToolCall = Callable[[str, str, str], Awaitable[None]]


class Relay:
    """A TCP relay in front of the NATS server that can cut every connection through it once (a flaky link)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: TaskSet[None] = TaskSet()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"nats://{host}:{port}"

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        self._pipes.start(self._pipe(reader, up_writer))
        self._pipes.start(self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction until either side closes; a closed connection is forgotten."""
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
        self._writers.discard(writer)

    def cut(self) -> None:
        """Close every connection through the relay (new ones are relayed again)."""
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self._pipes.cancel_all()


def relay_target(servers: list[str]) -> tuple[str, int] | None:
    """The first server's host and port, if it is plain ``nats://`` (a TLS link is not relayed)."""
    url = urlsplit(servers[0]) if servers else None
    if url is None or url.scheme != "nats" or url.hostname is None:
        return None
    return url.hostname, url.port or 4222


@contextlib.asynccontextmanager
async def edge_link(servers: list[str]) -> AsyncIterator[Relay | None]:
    """A relay to the first server while the block runs; None where the link cannot be relayed."""
    target = relay_target(servers)
    if target is None:
        yield None
        return
    relay = await Relay(*target).start()
    try:
        yield relay
    finally:
        await relay.stop()


async def play_trouble(bus: Bus, edge: Bus, relay: Relay | None, tool_call: ToolCall, asker: str) -> None:
    """The scene, once; ``asker`` is the guard handler whose asks the demo's operator answers."""
    session = "sess_trouble"
    await bus.port.publish_raw("prx.lifecycle.tool_call", b"{not json")  # a broken emitter
    await edge.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True, "output": "x" * 4096})
    for index in range(OUTAGE_ERRORS):
        await bus.emit("prx.lifecycle.error", {"component": "llm", "message": f"provider outage ({index})"})
    if relay is not None:
        await edge.flush()  # what it sent is through before its link drops
        relay.cut()
    operator = asyncio.create_task(_operator(bus, asker, allow=1))
    try:
        await tool_call(session, "git push --force origin main", EDGE_AGENT)  # allowed by the operator
        await tool_call(session, "git push --force origin release", EDGE_AGENT)  # left to expire
    finally:
        operator.cancel()
        await asyncio.gather(operator, return_exceptions=True)
    await edge.flush()


async def _operator(bus: Bus, asker: str, allow: int) -> None:
    """The demo's operator: allows the first ``allow`` asks of ``asker`` it finds waiting (never another's)."""
    store = AskStore(bus.port)
    try:
        while allow > 0:
            await asyncio.sleep(0.5)  # a person looks now and then, and reads before answering
            for waiting in await store.pending(store.user):
                if waiting.ask.handler != asker or waiting.ask.agent != EDGE_AGENT:
                    continue
                await store.answer(waiting.ask.id, "allow", OPERATOR)
                allow -= 1
                break
    except HookbusError as exc:  # no permission to answer here: the asks expire, which the panels show too
        log.warning("the demo's operator cannot answer asks: %s", exc)
