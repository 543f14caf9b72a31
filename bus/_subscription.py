"""The receive path of an event subscription: check, decode, set the depth, bound the handlers.

``Bus.subscribe`` makes one :class:`Subscription` per call and hands it the
raw messages of its pattern as the connection reads them (a direct
subscription: no queue or task between); everything a receiver must check
happens here. Handlers start inline (bus._runtime.eager); at most ``concurrency``
of them wait at once, and while they do, later messages wait in the
subscription's own backlog, bounded by ``pending_msgs`` and ``pending_bytes``.
What does not fit is dropped and counted as a slow consumer.

Each subscription also gets the vouched form of its pattern
(``hookbus.from.*.<pattern>``, bus._core.subjects): those events are handed on
under their plain subject with ``event.publisher`` set from the user token.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from bus._core import depth as _depth
from bus._core.envelope import Event, decode_event
from bus._core.errors import EnvelopeError
from bus._core.subjects import INTERNAL_PREFIXES, VOUCHED_PREFIX, hides_internal, split_vouched
from bus._journal.entries import JournalEntry, publish_entry
from bus._runtime.eager import start_eager
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.tasks import TaskSet
from bus._transport.port import TRANSPORT_FAILURES, Port, RawMessage, RawSubscription

log = logging.getLogger("hookbus.bus")
_set_depth = _depth._current.set
_reset_depth = _depth._current.reset

#: An event handler: called with each decoded event; may be sync or async. One of the handler family:
#: EventHandler (events), StageHandler (middleware stages), TurnHandler (agent turns).
EventHandler = Callable[[Event], Awaitable[None] | None]
#: The start of every vouched event subject (checked inline: this runs per message).
_VOUCHED_ROOT: Final = VOUCHED_PREFIX + "."
#: How long close() waits for in-flight handlers before cancelling them.
DEFAULT_CLOSE_TIMEOUT: Final = 5.0


class Subscription:
    """One handler on one pattern: checks and decodes, sets depth, bounds concurrency.

    What an honest emitter never sends (over the size limit, depth out of
    range, bad subject tokens, not UTF-8 JSON) is dropped and counted by
    reason. A pattern starting with a wildcard skips NATS's and hookbus's
    internal subjects (:data:`bus._core.subjects.INTERNAL_PREFIXES`) without counting them.
    """

    def __init__(
        self,
        bus: Port,
        pattern: str,
        queue: str | None,
        handler: EventHandler,
        concurrency: int,
        background: TaskSet[Any],
        on_unsubscribe: Callable[[Subscription], None],
        pending_msgs: int = 20_000,
        pending_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if pending_msgs < 0 or pending_bytes < 0:
            raise ValueError(f"pending limits must not be negative, not {pending_msgs} and {pending_bytes}")
        self.bus = bus
        self.pattern = pattern
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self._tasks: set[asyncio.Task[None]] = set()
        self._task_events: dict[asyncio.Task[None], Event] = {}
        self._delivered = bus.stats.delivered
        #: Messages read while ``concurrency`` handlers were waiting, in order, and their bytes.
        self._backlog: collections.deque[RawMessage] = collections.deque()
        self._backlog_bytes = 0
        self._pending_msgs = pending_msgs
        self._pending_bytes = pending_bytes
        self._slow_log = RateLimitedLog(log)
        self._stopped = False
        self._nats: RawSubscription | None = None
        #: The subscription to the vouched form of ``pattern`` (bus._core.subjects.vouched_pattern), if any.
        self._vouched_nats: RawSubscription | None = None
        self._hides_internal = hides_internal(pattern)
        self._max_bytes = bus.max_bytes
        self._max_depth = bus.max_depth
        self._load_payload = bus.load_payload
        self._malformed_log = RateLimitedLog(log)
        self._error_log = RateLimitedLog(log)
        self._background = background
        self._on_unsubscribe = on_unsubscribe

    @property
    def in_flight(self) -> int:
        """Handlers started and not yet finished."""
        return len(self._tasks)

    @property
    def waiting(self) -> int:
        """Messages received and waiting for a handler slot."""
        return len(self._backlog)

    def _on_msg(self, msg: RawMessage) -> None:
        """Each message as the connection reads it: delivered now, or held while every slot is taken."""
        if self._hides_internal and msg.subject.startswith(INTERNAL_PREFIXES):
            return  # plumbing, not an event: only a pattern naming it gets it
        if self._backlog or len(self._tasks) >= self.concurrency:
            self._hold(msg)
        else:
            self._deliver(msg)

    def _on_vouched_msg(self, msg: RawMessage) -> None:
        """Each message of the vouched pattern: under ``hookbus.``, so never skipped as internal."""
        if self._backlog or len(self._tasks) >= self.concurrency:
            self._hold(msg)
        else:
            self._deliver(msg)

    def _hold(self, msg: RawMessage) -> None:
        size = len(msg.data)
        if len(self._backlog) >= self._pending_msgs or self._backlog_bytes + size > self._pending_bytes:
            self.bus.stats.dropped.add("slow_consumer")
            self._slow_log.warning(
                "subscription %r: %d events waiting for its %d handlers; one dropped (slow consumer)",
                self.pattern,
                len(self._backlog),
                self.concurrency,
            )
            return
        self._backlog.append(msg)
        self._backlog_bytes += size

    def _release(self) -> None:
        """Deliver what waits, in order, while slots are free."""
        backlog, tasks = self._backlog, self._tasks
        while backlog and len(tasks) < self.concurrency:
            msg = backlog.popleft()
            self._backlog_bytes -= len(msg.data)
            self._deliver(msg)

    def _deliver(self, msg: RawMessage) -> None:
        subject = msg.subject
        publisher = None
        if subject.startswith(_VOUCHED_ROOT):
            vouched = split_vouched(subject)
            if vouched is None:
                self.bus.stats.dropped.add("malformed")
                self._malformed_log.warning("%s: not a vouched event subject (subscription %r)", subject, self.pattern)
                return
            publisher, subject = vouched
        try:
            event = decode_event(subject, msg.data, self._max_bytes, self._max_depth)
        except EnvelopeError as exc:
            self.bus.stats.dropped.add(exc.drop)
            self._malformed_log.warning("%s (subscription %r); message skipped", exc, self.pattern)
            return
        if publisher is not None:
            event.publisher = publisher
        if event.payload_ref is not None:  # a claimed event: its handlers may fetch the whole payload
            event.loader = self._load_payload
        tasks = self._tasks
        delivered = self._delivered
        if subject in delivered:
            delivered[subject] += 1
        else:
            delivered.add(subject)
        token = _set_depth(event.depth + 1)
        try:
            result = self.handler(event)
            if result is not None:
                task = start_eager(result)  # type: ignore[arg-type]
                if task is not None:
                    tasks.add(task)
                    self._task_events[task] = event
                    task.add_done_callback(self._finished)
        except (Exception, asyncio.CancelledError) as exc:  # a handler's fault, never the reader's
            self._failed(event, exc)
        finally:
            _reset_depth(token)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled() and not self._stopped:  # cancelled itself: its fault (a stop cancels the rest)
            self._failed(self._task_events.pop(task, None), asyncio.CancelledError("the handler cancelled its task"))
        elif not task.cancelled() and task.exception() is not None:
            self._failed(self._task_events.pop(task, None), task.exception())
        else:
            self._task_events.pop(task, None)
        if self._backlog and not self._stopped:
            self._release()

    def _failed(self, event: Event | None, exc: BaseException | None) -> None:
        """Count, log (rate-limited) and journal a handler that raised."""
        self.bus.stats.handler_errors.add(self.pattern)
        where = f"{event.subject} (id {event.id})" if event is not None else self.pattern
        self._error_log.warning("handler %s raised on %s: %r", _name(self.handler), where, exc)
        entry = JournalEntry(
            kind="subscriber",
            point=event.subject if event is not None else self.pattern,
            phase="handle",
            who=_name(self.handler),
            decision="failed",
            cause=f"{type(exc).__name__}: {exc}"[:500],
            session=event.session_id if event is not None else None,
            depth=event.depth if event is not None else 0,
            trace_id=event.id if event is not None else None,
        )
        self._background.start(publish_entry(self.bus, entry))

    async def unsubscribe(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Stop receiving; let in-flight handlers finish within ``timeout``, then cancel them."""
        self._stopped = True
        subs = (self._nats, self._vouched_nats)
        self._nats = self._vouched_nats = None
        for sub in subs:
            if sub is not None:
                with contextlib.suppress(*TRANSPORT_FAILURES):  # connection gone: nothing more will arrive
                    await sub.unsubscribe()
        self._backlog.clear()  # received, never started: dropped as nats-py drops its pending messages
        self._backlog_bytes = 0
        self._on_unsubscribe(self)
        await settle(self._tasks, timeout, f"handlers of {self.pattern!r}")


async def settle(tasks: set[asyncio.Task[Any]], timeout: float, what: str) -> None:
    """Wait for ``tasks`` up to ``timeout``; cancel and log what is left."""
    if not tasks:
        return
    _, pending = await asyncio.wait(set(tasks), timeout=timeout)
    if pending:
        log.warning("%d %s still running after %.1fs: cancelled", len(pending), what, timeout)
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=1.0)


def _name(handler: object) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)
