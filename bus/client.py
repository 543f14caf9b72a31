"""The Bus: connect, emit events, subscribe to them.

``emit`` is fire-and-forget on the agent's hot path: it raises at once for
caller bugs (bad subject, payload not JSON, too large) and never for transport
trouble, which it counts as a drop. ``subscribe`` hands decoded events to a
handler with the recursion depth set, and survives malformed messages and
failing handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Final, Literal, overload

from bus.core import depth as _depth
from bus.core import tracing as _tracing
from bus.core.catalog import check_strict
from bus.core.claim import DEFAULT_MAX_OBJECT_BYTES, whole_payload
from bus.core.decisions import Decision
from bus.core.envelope import DEFAULT_MAX_BYTES, Encoder, payload_bytes
from bus.core.errors import BusClosedError, ConfigError, NotSent, PayloadRefError, SubjectError, TransportError
from bus.core.ratelog import RateLimitedLog
from bus.core.schema import PayloadRefMsg
from bus.core.stats import COLLECTOR, BusStats
from bus.core.subjects import TOKEN_RE, normalise_pattern, publisher_token, vouched_pattern, wire_subject
from bus.core.tasks import TaskSet
from bus.counters import CountersReporter
from bus.middleware.kernel.asking import Asked
from bus.middleware.kernel.intercept import Interceptor, MiddlewareOptions
from bus.middleware.trust import Managed
from bus.subscription import DEFAULT_CLOSE_TIMEOUT, settle
from bus.subscription import EventHandler as EventHandler  # re-exported: the public names stay where they were
from bus.subscription import Subscription as Subscription
from bus.transport.connection import Credentials, auth_options, resolve_servers, with_private_inbox
from bus.transport.kv import Bucket
from bus.transport.nats_connection import NatsConnection
from bus.transport.once import OnceBucket, once_bucket
from bus.transport.port import Connection, ObjectStore, RawMessage, RawSubscription, Trouble
from bus.transport.server import NatsServer
from bus.transport.streams import PullConsumer, StreamMessage, StreamSpec, StreamState
from bus.turns.server import TurnHandler, TurnRequest, TurnServer

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


class BusState(enum.Enum):
    """A Bus opens once and closes once; it is never reopened."""

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


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
    the rest (tool aliases, output drain, shutdown clamp).

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
        self._max_object_bytes = max_object_bytes
        self._payloads: ObjectStore | None = None
        self._connect_timeout = connect_timeout
        self._close_timeout = close_timeout
        self._nats_options = with_private_inbox(
            self._servers or [],
            {**auth_options(overrides=credentials.overrides() if credentials else None), **(nats_options or {})},
        )
        #: The NATS user this Bus journals as (the token after ``_INBOX.``), or None without one.
        #: Journal subjects end with it and the shipped permissions let each user publish only
        #: its own, so a sink knows who wrote an entry without trusting the entry.
        self.journal_origin: str | None = str(self._nats_options["inbox_prefix"]).partition(".")[2] or None
        #: The NATS user this Bus's events are vouched as (docs/protocol.md, Publisher identity): with one,
        #: ``emit`` publishes on ``hookbus.from.<user>.<subject>``, which the shipped permissions let only that
        #: user publish; None (no user, or one that is not a subject token): on the plain subject, unvouched.
        self.publisher: str | None = publisher_token(self.journal_origin)
        #: Subject emitted to -> subject published on (the vouched one); bounded like the encoder's heads.
        self._wire: dict[str, str] = {}
        self._conn: Connection | None = None
        self._subs: set[Subscription] = set()
        self._turn_servers: list[TurnServer] = []
        self._background: TaskSet[Any] = TaskSet()
        self._denied_log = RateLimitedLog(log, interval=5.0)
        self._error_log = RateLimitedLog(log, interval=5.0)
        self._state = BusState.UNOPENED
        self._warned_disconnected = False
        self._counters: CountersReporter | None = None
        self._traced = False
        self.middleware = Interceptor(
            self, managed=Managed.of(managed), trust_new=trust_new, options=middleware or MiddlewareOptions()
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
        return self._state

    def _connection(self) -> Connection:
        if self._conn is None:
            raise BusClosedError(f"Bus is {self._state.value}: no NATS connection")
        return self._conn

    @property
    def nc(self) -> Any:
        """The client underneath (nats-py's; the in-process broker's on a TestBus), for tests and tools.

        Everything hookbus does goes through the Bus's own methods; this is the
        way out for what they do not offer (JetStream administration, raw NATS).
        """
        return self._connection().raw

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.is_connected

    @property
    def max_bytes(self) -> int:
        return self._encoder.max_bytes

    async def start(self) -> Bus:
        """Connect (starting the embedded server first if asked for one)."""
        if self._state is not BusState.UNOPENED:
            raise BusClosedError(f"Bus is {self._state.value}: a Bus is opened once")
        conn = self._conn = await self._connect()
        if conn.max_payload < self._encoder.max_bytes:
            await self._abandon()
            raise ConfigError(
                f"max_bytes={self._encoder.max_bytes} is over the server's max_payload ({conn.max_payload})"
            )
        self._state = BusState.OPEN
        #: Whether events carry the trace context: this process used OpenTelemetry when the Bus opened.
        self._traced = _tracing.active()
        COLLECTOR.track(self.stats)
        self._payloads = conn.payload_store(self._max_object_bytes)
        self._counters = CountersReporter(self).start()  # the fleet's view of this process (bus/counters.py)
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

    async def close(self) -> None:
        """Unsubscribe, let handlers finish (bounded), flush, disconnect."""
        if self._state is not BusState.OPEN:
            self._state = BusState.CLOSED
            return
        self._state = BusState.CLOSED
        await self.middleware.close()
        for server in self._turn_servers:
            await server.stop(self._close_timeout)
        for sub in list(self._subs):
            await sub.unsubscribe(self._close_timeout)
        await settle(self._background, self._close_timeout, "journal writes")
        if self._counters is not None:
            await self._counters.close()  # the last counts go out before the connection closes
        conn, self._conn = self._conn, None
        if conn is not None and not await conn.close(flush_timeout=self._close_timeout):
            log.warning("could not flush pending events to NATS while closing")
        COLLECTOR.retire(self.stats)
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.cleanup)

    async def _abandon(self) -> None:
        conn, self._conn = self._conn, None
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
        conn = self._conn
        if conn is None:
            raise BusClosedError(f"emit on a Bus that is {self._state.value}")
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

    async def publish_raw(self, subject: str, data: bytes, reply: str = "") -> None:
        """Publish bytes as they are (plumbing, tools and tests; no envelope, no checks)."""
        await self._connection().publish(subject, data, reply)

    async def subscribe_raw(
        self,
        subject: str,
        cb: Callable[[RawMessage], Awaitable[None]],
        *,
        queue: str = "",
        pending_msgs_limit: int | None = None,
    ) -> RawSubscription:
        """Call ``cb`` with each raw message on ``subject`` (plumbing: turn and module requests; no envelope)."""
        return await self._connection().subscribe(subject, cb, queue=queue, pending_msgs_limit=pending_msgs_limit)

    async def subscribe_direct(
        self, subject: str, cb: Callable[[RawMessage], None], *, queue: str = ""
    ) -> RawSubscription:
        """Call ``cb`` as each raw message is read, with no queue or task between (plumbing: the middleware's
        requests and replies). ``cb`` must not block; what it must wait for goes in a task
        (:func:`bus.core.eager.run_eager`)."""
        return await self._connection().subscribe_direct(subject, cb, queue=queue)

    async def request_raw(self, subject: str, data: bytes, timeout_s: float) -> bytes:
        """Send a raw request and return the reply's bytes (plumbing: status queries; no envelope).

        Raises NoResponders when nobody listens on ``subject``, RequestTimeout when no reply comes.
        """
        return await self._connection().request(subject, data, timeout_s)

    def new_inbox(self) -> str:
        """A fresh reply subject under this connection's private inbox prefix."""
        return self._connection().new_inbox()

    def once_bucket(self, name: str, max_age_s: float) -> OnceBucket:
        """A write-once KV bucket on this connection (bus.transport.once: the asks are kept so)."""
        return once_bucket(self._connection().raw, name, max_age_s)

    async def open_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Bind to a KV bucket, creating it on first use; RegistryError when JetStream is off or denies it."""
        return await self._connection().open_bucket(name, ttl_s)

    async def ensure_bucket(self, name: str, ttl_s: float | None = None) -> Bucket:
        """Open a KV bucket, creating it or bringing an older one to hookbus's config (``hookbus up``): no
        rollup headers, no purges, so no writer erases what others put; RegistryError if refused."""
        return await self._connection().ensure_bucket(name, ttl_s)

    async def ensure_stream(self, spec: StreamSpec) -> StreamState:
        """Create (or update) a JetStream stream; JournalError if the server refuses."""
        return await self._connection().ensure_stream(spec)

    async def stream_state(self, name: str) -> StreamState | None:
        """A JetStream stream's state, None if it does not exist; JournalError if the server does not answer."""
        return await self._connection().stream_state(name)

    async def pull_consumer(
        self, stream: str, subject: str, durable: str, *, ack_wait_s: float, max_ack_pending: int
    ) -> PullConsumer:
        """Bind to (or create) a durable pull consumer with explicit acks (the journal sink's)."""
        return await self._connection().pull_consumer(
            stream, subject, durable, ack_wait_s=ack_wait_s, max_ack_pending=max_ack_pending
        )

    def read_since(self, stream: str, since: datetime) -> AsyncIterator[StreamMessage]:
        """A stream's messages from ``since`` on, oldest first (``hookbus history``); JournalError if refused."""
        return self._connection().read_since(stream, since)

    def jetstream(self) -> Any:
        """nats-py's JetStream context of this connection, for tests and tools (hookbus code uses the methods above)."""
        return self.nc.jetstream()

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts (its ``max_payload``)."""
        return self._connection().max_payload

    def push_now(self, subject: str, data: bytes, reply: str = "") -> Coroutine[Any, Any, None] | None:
        """:meth:`push` without a coroutine: None once the message is in the outgoing buffer (the common case),
        else an awaitable to await (the buffer is full, or the plain publish fallback). Drops are counted."""
        conn = self._conn
        if conn is None:
            self.stats.dropped.add("closed")
            return None
        try:
            waiting = conn.push(subject, data, reply)
        except NotSent:
            self.stats.dropped.add("disconnected")
            return None
        return None if waiting is None else self._wait_sent(waiting)

    async def _wait_sent(self, waiting: Awaitable[None]) -> None:
        try:
            await waiting
        except NotSent:
            self.stats.dropped.add("disconnected")

    async def push(self, subject: str, data: bytes, reply: str = "") -> None:
        """Publish bytes on the fast path (middleware requests, replies, journal entries; no envelope).

        Transport trouble drops the message (counted), as emit does.
        """
        conn = self._conn
        if conn is None:
            self.stats.dropped.add("closed")
            return
        try:
            waiting = conn.push(subject, data, reply)
            if waiting is not None:
                await waiting
        except NotSent:
            self.stats.dropped.add("disconnected")

    async def _oversize(
        self, subject: str, payload: Mapping[str, Any], session_id: str | None, depth: int, size: int
    ) -> bytes:
        """An event over the limit: its payload kept whole in the object store, else cut to fit (both counted)."""
        store = self._payloads
        ref = None if store is None else await store.put(payload_bytes(subject, payload))
        if ref is None:
            self.stats.truncated += 1
        else:
            self.stats.claimed += 1
        return self._encoder.fit(subject, payload, session_id, depth, size, ref)

    async def load_payload(self, subject: str, ref: PayloadRefMsg) -> dict[str, Any]:
        """The whole payload a received event refers to (``Event.full_payload`` calls this), checked.

        Raises PayloadRefError when the reference is refused (another bucket, over
        ``max_object_bytes``) or the object is missing or not what it names.
        """
        store = self._payloads
        if store is None:
            raise PayloadRefError(subject, f"the Bus is {self._state.value}: nothing to fetch the payload with")
        return whole_payload(subject, await store.fetch(subject, ref))

    async def ensure_payloads_bucket(self) -> None:
        """Create the claim check's object store if missing (``hookbus up``); RegistryError if refused."""
        await self._connection().ensure_payloads_bucket()

    @property
    def max_object_bytes(self) -> int:
        """The largest whole payload this Bus keeps in (or fetches from) the object store."""
        return self._max_object_bytes

    def new_id(self) -> str:
        """A unique id (the one generator of event ids; middleware calls use it too)."""
        return self._encoder.new_id()

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
        depth is the current one (:mod:`bus.core.depth`). See :mod:`bus.middleware.kernel.intercept`.
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
        :func:`bus.core.subjects.normalise_pattern`). Subscribers sharing a ``queue``
        name share the events: each goes to one of them.
        """
        nats_pattern = normalise_pattern(pattern)
        if queue is not None and not TOKEN_RE.fullmatch(queue):
            raise SubjectError(queue, "a queue group name must match [A-Za-z0-9_-]+")
        conn = self._connection()
        sub = Subscription(
            self,
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
        conn = self._connection()
        if conn.is_connected:
            with contextlib.suppress(TransportError, TimeoutError):
                await conn.flush(self._connect_timeout)

    async def serve_turns(self, agent: str, handler: TurnHandler, *, concurrency: int = 4) -> TurnServer:
        """Run ``handler`` for each turn request to ``agent`` (replicas share them).

        Inside the handler the recursion depth is the request's, so everything
        the turn emits or intercepts carries it.
        """
        server = await TurnServer(self, agent, handler, concurrency).start()
        self._turn_servers.append(server)
        return server

    async def request_turn(self, request: TurnRequest, reply: str = "") -> bool:
        """Ask an agent to start a turn (fire-and-forget; ``reply`` gets a TurnResult)."""
        try:
            await self._connection().publish(request.subject, request.encode(), reply)
        except NotSent:
            self.stats.dropped.add("disconnected")
            return False
        return True

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the server has processed everything sent so far: events, subscriptions, requests.

        Unlike nats-py's own ``flush`` this keeps its promise (see
        :func:`bus.transport.publisher.ordered_flush`). Raises TimeoutError
        when the server does not answer within ``timeout``.
        """
        await self._connection().flush(timeout)

    async def _on_trouble(self, trouble: Trouble, exc: Exception) -> None:
        if self._state is BusState.UNOPENED:
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
        if self._state is BusState.OPEN:
            self.stats.disconnects += 1
            log.warning("disconnected from NATS (%s); reconnecting", ", ".join(self.servers))

    async def _on_reconnect(self) -> None:
        self.stats.reconnects += 1
        log.warning("reconnected to NATS at %s", self._conn.server if self._conn is not None else "?")
