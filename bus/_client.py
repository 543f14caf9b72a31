"""The Bus: connect, emit events, subscribe to them.

``emit`` is fire-and-forget on the agent's hot path: it raises at once for
caller bugs (bad subject, payload not JSON, too large) and never for transport
trouble, which it counts as a drop. ``subscribe`` hands decoded events to a
handler with the recursion depth set, and survives malformed messages and
failing handlers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, overload

from bus._bulk import BULK_SUFFIX, BulkLine
from bus._core import depth as _depth
from bus._core.catalog import check_strict
from bus._core.claim import DEFAULT_MAX_OBJECT_BYTES
from bus._core.decisions import Decision
from bus._core.encoder import Encoder, payload_bytes
from bus._core.envelope import DEFAULT_MAX_BYTES
from bus._core.errors import BusClosedError, ConfigError, NotSent, SubjectError
from bus._core.subjects import TOKEN_RE, normalise_pattern, publisher_token, vouched_pattern, wire_subject
from bus._counters import CountersReporter
from bus._middleware.kernel.asking import Asked
from bus._middleware.kernel.intercept import Interceptor, MiddlewareOptions
from bus._middleware.rules.book import RuleBook, load_files, split_sources
from bus._middleware.trust import Managed
from bus._port import BusPort
from bus._port import BusState as BusState  # re-exported: the public names stay where they were
from bus._runtime import tracing as _tracing
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.stats import COLLECTOR, BusStats
from bus._runtime.tasks import TaskSet
from bus._subscription import DEFAULT_CLOSE_TIMEOUT, settle
from bus._subscription import EventHandler as EventHandler  # re-exported: the public names stay where they were
from bus._subscription import Subscription as Subscription
from bus._transport.connection import Credentials, auth_options, resolve_servers, with_private_inbox
from bus._transport.nats_connection import NatsConnection
from bus._transport.port import Connection, Trouble
from bus._transport.server import NatsServer
from bus._turns.server import TurnHandler, TurnRequest, TurnServer, spawned

log = logging.getLogger("hookbus.bus")
_current_depth = _depth.current_depth
_current_traceparent = _tracing.current_traceparent
_set_depth = _depth._current.set
_reset_depth = _depth._current.reset

#: The older name of EventHandler, kept for code that imports it.
Handler = EventHandler

#: Handlers of one subscription running at once, unless the caller says otherwise.
DEFAULT_CONCURRENCY: Final = 64
#: Messages (and bytes) a subscription holds before NATS-side drops begin.
DEFAULT_PENDING_MSGS: Final = 20_000
DEFAULT_PENDING_BYTES: Final = 64 * 1024 * 1024

_EMPTY: Final[Mapping[str, Any]] = {}


class Bus:
    """A connection to the hookbus: emit events, subscribe to them, run middleware chains.

    ``Bus()`` connects to ``$NATS_URL``, else ``nats://127.0.0.1:4222`` (where
    ``hookbus up`` listens). ``Bus(embedded=True)`` starts a private nats-server
    for this Bus alone, for tests and notebooks.

    An event over ``max_bytes`` keeps its payload whole in the ``hookbus_payloads``
    object store (up to ``max_object_bytes``) and goes out with a reference and a
    preview; without the store it is cut to fit (docs/events.md, Oversized events).

    Middleware (``intercept``): ``trust_new=True`` approves handlers never seen
    before on first sight (development); ``managed`` names handlers or modules
    of the operator's config that run without approval; ``middleware`` holds
    the rest (tool aliases, output drain, shutdown clamp). ``rules`` adds this
    agent's own rule files (paths: run as its configuration, refused at once
    with file and line when broken) and names ``global: false`` files of the
    fleet's rules bucket it takes (docs/rules.md).

    ``credentials`` carries credential and TLS files given as arguments (the
    command line's flags); a field left unset falls back to its
    ``HOOKBUS_NATS_*`` variable.
    """

    def __init__(
        self,
        servers: str | list[str] | None = None,
        *,
        name: str = "hookbus",
        embedded: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
        max_depth: int = _depth.DEFAULT_MAX_DEPTH,
        strict: bool = False,
        connect_timeout: float = 10.0,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        source: str | None = None,
        nats_options: dict[str, Any] | None = None,
        credentials: Credentials | None = None,
        trust_new: bool = False,
        managed: Iterable[str] = (),
        middleware: MiddlewareOptions | None = None,
        rules: Iterable[str | Path] = (),
    ) -> None:
        if embedded and servers is not None:
            raise ValueError("give either servers or embedded=True, not both")
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, not {max_depth}")
        self.name = name
        self.max_depth = max_depth
        self.strict = strict
        self.stats = BusStats()
        self._servers = None if embedded else resolve_servers(servers)
        self._embedded: NatsServer | None = NatsServer(die_with_parent=True) if embedded else None
        self._encoder = Encoder(max_bytes, source, cut=False)
        self._connect_timeout = connect_timeout
        self._close_timeout = close_timeout
        self._nats_options = with_private_inbox(
            self._servers or [],
            {**auth_options(overrides=credentials.overrides() if credentials else None), **(nats_options or {})},
        )
        journal_origin = str(self._nats_options["inbox_prefix"]).partition(".")[2] or None
        self._port = BusPort(
            encoder=self._encoder,
            stats=self.stats,
            max_depth=max_depth,
            max_object_bytes=max_object_bytes,
            journal_origin=journal_origin,
            emit=self.emit,
        )
        #: The NATS user this Bus's events are vouched as (docs/protocol.md, Publisher identity): with one,
        #: ``emit`` publishes on ``hookbus.from.<user>.<subject>``, which the shipped permissions let only that
        #: user publish; None (no user, or one that is not a subject token): on the plain subject, unvouched.
        self.publisher: str | None = publisher_token(journal_origin)
        #: Subject emitted to -> subject published on (the vouched one); bounded like the encoder's heads.
        self._wire: dict[str, str] = {}
        self._subs: set[Subscription] = set()
        self._turn_servers: list[TurnServer] = []
        self._background: TaskSet[Any] = TaskSet()
        self._denied_log = RateLimitedLog(log, interval=5.0)
        self._error_log = RateLimitedLog(log, interval=5.0)
        self._warned_disconnected = False
        self._counters: CountersReporter | None = None
        self._traced = False
        #: Event subscriptions read on a connection of their own (bus/_bulk.py): a flood never costs a decision.
        self._bulk = BulkLine(self.stats, self._connect_bulk, shared=self._bulk_shared)
        paths, stems = split_sources(rules)
        self.middleware = Interceptor(
            self._port,
            managed=Managed.of(managed),
            trust_new=trust_new,
            options=middleware or MiddlewareOptions(),
            rules=RuleBook(load_files(paths), stems),
        )

    @property
    def servers(self) -> list[str]:
        """The NATS URLs this Bus connects to."""
        if self._embedded is not None:
            return [self._embedded.url]
        assert self._servers is not None
        return self._servers

    @property
    def state(self) -> BusState:
        return self._port.state

    @property
    def port(self) -> BusPort:
        """The plumbing under this Bus (:mod:`bus.port`): hookbus's own layers use it; not part of the public API."""
        return self._port

    @property
    def connected(self) -> bool:
        return self._port.connected

    @property
    def max_bytes(self) -> int:
        return self._encoder.max_bytes

    async def start(self) -> Bus:
        """Connect (starting the embedded server first if asked for one).

        Raises ConnectError when no server can be reached (TLS and credentials
        included), ServerError when the embedded server does not start,
        ConfigError when ``max_bytes`` is over the server's ``max_payload``,
        BusClosedError on a Bus opened before.
        """
        port = self._port
        if port.state is not BusState.UNOPENED:
            raise BusClosedError(f"Bus is {port.state.value}: a Bus is opened once")
        conn = await self._connect()
        port.attach(conn)
        if conn.max_payload < self._encoder.max_bytes:
            await self._abandon()
            raise ConfigError(
                f"max_bytes={self._encoder.max_bytes} is over the server's max_payload ({conn.max_payload})"
            )
        port.state = BusState.OPEN
        #: Whether events carry the trace context: this process used OpenTelemetry when the Bus opened.
        self._traced = _tracing.active()
        COLLECTOR.track(self.stats)
        port.payloads = conn.payload_store(port.max_object_bytes)
        self._counters = CountersReporter(port).start()  # the fleet's view of this process (bus/_counters.py)
        return self

    async def _connect(self) -> Connection:
        """Open the connection (the one step :class:`bus.testing.TestBus` replaces with an in-process one)."""
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.start)
        try:
            return await NatsConnection.open(
                self.servers,
                name=self.name,
                connect_budget=self._connect_timeout,
                on_trouble=self._on_trouble,
                on_disconnect=self._on_disconnect,
                on_reconnect=self._on_reconnect,
                options=self._nats_options,
            )
        except BaseException:
            if self._embedded is not None:
                await asyncio.to_thread(self._embedded.cleanup)
            raise

    #: Whether the bulk line is the main connection itself (TestBus's in-process broker), never closed apart.
    _bulk_shared = False

    async def _connect_bulk(self, line: BulkLine) -> Connection:
        """Open the event subscriptions' connection: the main one's servers, user and options, its own socket."""
        return await NatsConnection.open(
            self.servers,
            name=self.name + BULK_SUFFIX,
            connect_budget=self._connect_timeout,
            on_trouble=line.on_trouble,
            on_disconnect=line.on_disconnect,
            on_reconnect=line.on_reconnect,
            options=self._nats_options,
        )

    async def close(self) -> None:
        """Unsubscribe, let handlers finish (bounded), flush, disconnect."""
        port = self._port
        if port.state is not BusState.OPEN:
            port.state = BusState.CLOSED
            return
        port.state = BusState.CLOSED
        await self.middleware.close()
        for server in self._turn_servers:
            await server.stop(self._close_timeout)
        for sub in list(self._subs):
            await sub.unsubscribe(self._close_timeout)
        await settle(self._background, self._close_timeout, "journal writes")
        if self._counters is not None:
            await self._counters.close()  # the last counts go out before the connection closes
        await self._bulk.close()
        conn = port.detach()
        if conn is not None and not await conn.close(flush_timeout=self._close_timeout):
            log.warning("could not flush pending events to NATS while closing")
        COLLECTOR.retire(self.stats)
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.cleanup)

    async def _abandon(self) -> None:
        await self._bulk.close()
        conn = self._port.detach()
        if conn is not None:
            await conn.close()
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.cleanup)

    async def __aenter__(self) -> Bus:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def emit(self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None) -> bool:
        """Publish an event; True if it went out (or was buffered), False if dropped.

        Raises SubjectError, PayloadError (NotSerializableError, PayloadTooLarge)
        for caller bugs and BusClosedError on a closed Bus; never for transport
        trouble. At the recursion limit the event is dropped silently and counted.
        """
        depth = _current_depth()
        if self.strict:
            check_strict(subject, payload or _EMPTY)
        traceparent = _current_traceparent() if self._traced else None
        data, truncated = self._encoder.encode(
            subject, _EMPTY if payload is None else payload, session_id, depth, traceparent
        )
        stats = self.stats
        if depth >= self.max_depth:
            stats.dropped.add("depth")
            return False
        if truncated:  # over the limit: kept whole in the object store, or cut to fit
            data = await self._oversize(subject, _EMPTY if payload is None else payload, session_id, depth, len(data))
        conn = self._port.conn
        if conn is None:
            raise BusClosedError(f"emit on a Bus that is {self._port.state.value}")
        wire = self._wire.get(subject) or self._wire_subject(subject)
        try:
            waiting = conn.push(wire, data)
            if waiting is not None:
                await waiting
        except NotSent as exc:
            stats.dropped.add(exc.reason)
            return False
        emitted = stats.emitted
        if subject in emitted:
            emitted[subject] += 1
        else:
            emitted.add(subject)
        return True

    def _wire_subject(self, subject: str) -> str:
        """The subject an event of ``subject`` goes out on: vouched when this Bus has a user (internal ones never)."""
        wire = wire_subject(self.publisher, subject)
        if len(self._wire) >= 4096:  # as many subjects as the encoder remembers
            self._wire.clear()
        self._wire[subject] = wire
        return wire

    async def _oversize(
        self, subject: str, payload: Mapping[str, Any], session_id: str | None, depth: int, size: int
    ) -> bytes:
        """An event over the limit: its payload kept whole in the object store, else cut to fit (both counted)."""
        store = self._port.payloads
        ref = None if store is None else await store.put(payload_bytes(subject, payload))
        if ref is None:
            self.stats.truncated += 1
        else:
            self.stats.claimed += 1
        return self._encoder.fit(subject, payload, session_id, depth, size, ref)

    @property
    def max_object_bytes(self) -> int:
        """The largest whole payload this Bus keeps in (or fetches from) the object store."""
        return self._port.max_object_bytes

    @property
    def journal_origin(self) -> str | None:
        """The NATS user this Bus journals as (the token after ``_INBOX.``), or None without one.

        Journal subjects end with it and the shipped permissions let each user publish only
        its own, so a sink knows who wrote an entry without trusting the entry.
        """
        return self._port.journal_origin

    @overload
    async def intercept(
        self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None, *, hold: Literal[True] = True
    ) -> Decision: ...

    @overload
    async def intercept(
        self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None, *, hold: bool
    ) -> Decision | Asked: ...

    async def intercept(
        self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None, *, hold: bool = True
    ) -> Decision | Asked:
        """Run the middleware chain of ``stage``; return Continue(), Cancel(reason) or Patch(payload).

        A stage nobody declared returns Continue() without touching the
        network. ``ctx`` may carry ``session`` and ``agent``; the recursion
        depth is the current one (:mod:`bus._core.depth`). See :mod:`bus._middleware.kernel.intercept`.
        A handler's Ask holds the call until an operator answers (or its deadline); with ``hold=False``
        it returns ``Asked(id, deadline)`` at once instead, and ``await bus.answer(id)`` gives the decision.
        """
        if hold:
            return await self.middleware.intercept(stage, payload, ctx)
        return await self.middleware.intercept_unheld(stage, payload, ctx)

    async def answer(self, ask_id: str) -> Decision:
        """The decision of a call ``intercept(..., hold=False)`` returned ``Asked`` for, once answered or expired."""
        return await self.middleware.answer(ask_id)

    async def subscribe(
        self,
        pattern: str,
        handler: EventHandler,
        queue: str | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        pending_msgs: int = DEFAULT_PENDING_MSGS,
        pending_bytes: int = DEFAULT_PENDING_BYTES,
    ) -> Subscription:
        """Call ``handler(event)`` for each event matching ``pattern``.

        ``pattern`` is a NATS pattern or a PRX-style one (see
        :func:`bus._core.subjects.normalise_pattern`). Subscribers sharing a ``queue``
        name share the events: each goes to one of them.
        """
        nats_pattern = normalise_pattern(pattern)
        if queue is not None and not TOKEN_RE.fullmatch(queue):
            raise SubjectError(queue, "a queue group name must match [A-Za-z0-9_-]+")
        self._port.connection()  # BusClosedError on a Bus not open
        conn = await self._bulk.connection()
        sub = Subscription(
            self._port,
            nats_pattern,
            queue,
            handler,
            concurrency,
            self._background,
            self._subs.discard,
            pending_msgs=pending_msgs,
            pending_bytes=pending_bytes,
        )
        sub._nats = await conn.subscribe_direct(nats_pattern, sub._on_msg, queue=queue or "")
        mirror = vouched_pattern(nats_pattern)
        if mirror is not None:
            sub._vouched_nats = await conn.subscribe_direct(mirror, sub._on_vouched_msg, queue=queue or "")
        self._subs.add(sub)
        await self._settle_subscription()
        return sub

    async def _settle_subscription(self) -> None:
        """Let a new subscription reach the server, so what is published after we return is delivered.

        While disconnected nats-py re-sends subscriptions on reconnect: nothing to wait for.
        """
        await self._bulk.flush(self._connect_timeout)

    async def serve_turns(self, agent: str, handler: TurnHandler, *, concurrency: int = 4) -> TurnServer:
        """Run ``handler`` for each turn request to ``agent`` (replicas share them).

        Inside the handler the recursion depth is the request's, so everything
        the turn emits or intercepts carries it.
        """
        server = await TurnServer(self._port, agent, handler, concurrency).start()
        self._turn_servers.append(server)
        return server

    async def request_turn(self, request: TurnRequest, reply: str = "") -> bool:
        """Ask an agent to start a turn (fire-and-forget; ``reply`` gets a TurnResult).

        Asked from inside a turn (its runner's task, or one it started), the request is that turn's child
        (``parent`` and ``spawn_depth`` + 1) unless it names a parent itself.
        """
        request = spawned(request)
        try:
            await self._port.connection().publish(request.subject, request.encode(), reply)
        except NotSent:
            self.stats.dropped.add("disconnected")
            return False
        return True

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the server has processed everything sent so far: events, subscriptions, requests.

        Unlike nats-py's own ``flush`` this keeps its promise (see
        :func:`bus._transport.publisher.ordered_flush`). Raises TimeoutError
        when the server does not answer within ``timeout``.
        """
        await self._port.connection().flush(timeout)
        conn = self._bulk.conn
        if conn is not None and conn.is_connected:  # the event subscriptions made so far are in place too
            await conn.flush(timeout)

    async def _on_trouble(self, trouble: Trouble, exc: Exception) -> None:
        if self._port.state is BusState.UNOPENED:
            log.debug("NATS connect attempt failed: %r", exc)  # the first connect reports as a whole
            return
        if trouble is Trouble.SLOW_CONSUMER:
            self.stats.dropped.add("slow_consumer")
            return
        if trouble is Trouble.CONNECTION:
            log.debug("NATS connection trouble: %r", exc)
            return
        if trouble is Trouble.DENIED:
            self.stats.dropped.add("denied")
            self._denied_log.warning("the NATS server denied %s: %s", self.name, str(exc).removeprefix("nats: "))
            return
        self._error_log.warning("NATS error: %r", exc)

    async def _on_disconnect(self) -> None:
        if self._port.state is BusState.OPEN:
            self.stats.disconnects += 1
            log.warning("disconnected from NATS (%s); reconnecting", ", ".join(self.servers))

    async def _on_reconnect(self) -> None:
        self.stats.reconnects += 1
        log.warning("reconnected to NATS at %s", conn.server if (conn := self._port.conn) is not None else "?")
