"""The shell-hook worker: subscribe to what hooks.json names, run the hooks, bounded.

One subscription per event key (NATS pattern) of hooks.json, in a queue group
so that workers on many machines share the events (each event's hooks run on
one worker: at-most-once). The NATS callback only enqueues: events wait in a
bounded queue, and a full queue sheds the event and counts it. A dispatcher
takes events off the queue and starts each hook once one of ``max_procs``
process slots is free, so the worker never forks without bound and its memory
is bounded by ``queue_size``. The actions of one event run concurrently and
independently. A change to hooks.json changes the subscriptions in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from bus.client import Bus, Subscription
from bus.envelope import Event
from bus.journal import JournalEntry, record
from bus.ratelog import RateLimitedLog
from subscribers import metrics
from subscribers.hooks_config import HookEntry, HooksConfig
from subscribers.hooks_file import DEFAULT_POLL_INTERVAL, HOOKS_FILE, HooksFile
from subscribers.limits import (
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_KILL_GRACE,
    DEFAULT_MAX_PROCS,
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_SIZE,
)
from subscribers.shell import HookResult, Outcome, ShellRunner

log = logging.getLogger("hookbus.shell")


@dataclass
class WorkerStats:
    """What this worker did, as plain numbers (Prometheus has the per-hook view)."""

    received: int = 0
    shed: int = 0
    runs: int = 0
    failures: int = 0
    timeouts: int = 0
    refusals: int = 0
    running_peak: int = 0

    def count(self, result: HookResult) -> None:
        if result.outcome is Outcome.REFUSED:
            self.refusals += 1
            return
        if result.exit_code is not None:
            self.runs += 1
        if result.outcome is Outcome.TIMEOUT:
            self.timeouts += 1
        elif result.outcome is Outcome.FAILED:
            self.failures += 1


Job = tuple[tuple[HookEntry, ...], Event]


def journal_entry(result: HookResult, event: Event) -> JournalEntry:
    """What a hook run did, for the shared journal (never the payload it was given)."""
    return JournalEntry(
        kind="shell_hook",
        point=event.subject,
        phase="run",
        who=result.hook_id,
        decision=result.outcome.value,
        cause=result.reason,
        duration_ms=round(result.duration * 1000, 3),
        session=event.session_id,
        depth=event.depth,
        trace_id=event.id,
    )


class ShellWorker:
    """Runs the shell hooks of one workspace, fed from the bus."""

    def __init__(
        self,
        bus: Bus,
        workspace: Path,
        *,
        nats_url: str | None = None,
        queue: str | None = DEFAULT_QUEUE,
        max_procs: int = DEFAULT_MAX_PROCS,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        kill_grace: float = DEFAULT_KILL_GRACE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
    ) -> None:
        if max_procs < 1 or queue_size < 1:
            raise ValueError(f"max_procs and queue_size must be at least 1 (got {max_procs}, {queue_size})")
        self.bus = bus
        self.queue = queue or None
        self.max_procs = max_procs
        self.drain_timeout = drain_timeout
        self.runner = ShellRunner(workspace, nats_url=nats_url or ",".join(bus.servers), kill_grace=kill_grace)
        self.hooks = HooksFile(workspace / HOOKS_FILE, self._on_config, poll_interval)
        self.stats = WorkerStats()
        self._queue: asyncio.Queue[Job] = asyncio.Queue(queue_size)
        self._slots = asyncio.Semaphore(max_procs)
        self._active = 0
        self._groups: dict[str, tuple[HookEntry, ...]] = {}
        self._subs: dict[str, Subscription] = {}
        self._sync_lock = asyncio.Lock()
        self._stopping = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._dispatcher: asyncio.Task[None] | None = None
        self._refusal_log = RateLimitedLog(log, interval=5.0)

    @property
    def config(self) -> HooksConfig:
        return self.hooks.config

    @property
    def patterns(self) -> list[str]:
        """The NATS patterns subscribed to now."""
        return sorted(self._subs)

    async def start(self) -> ShellWorker:
        """Load hooks.json, subscribe, and start watching the file and running hooks."""
        self._dispatcher = asyncio.create_task(self._dispatch(), name="shell hook dispatcher")
        self.hooks.start()
        await self._sync_subscriptions()
        return self

    async def reload(self) -> bool:
        """Look at hooks.json now (the HTTP API calls this after a write); True if it changed."""
        changed = self.hooks.check()
        await self._sync_subscriptions()
        return changed

    def _on_config(self, config: HooksConfig) -> None:
        self._groups = config.runnable_by_pattern()
        log.info("hooks.json: %d hooks on %d patterns", len(config.entries), len(self._groups))
        if self._dispatcher is not None:
            task = asyncio.create_task(self._sync_subscriptions())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _sync_subscriptions(self) -> None:
        """Subscribe to new patterns, unsubscribe from gone ones."""
        async with self._sync_lock:
            if self._stopping:
                return
            wanted = set(self._groups)
            for pattern in sorted(set(self._subs) - wanted):
                await self._subs.pop(pattern).unsubscribe(timeout=1.0)
            added = sorted(wanted - set(self._subs))
            for pattern in added:
                handler = _Enqueue(self, pattern)
                self._subs[pattern] = await self.bus.subscribe(pattern, handler, self.queue)
            if added:
                await self.bus.flush()  # the server has the subscriptions: "started" means receiving

    def enqueue(self, pattern: str, event: Event) -> None:
        """The NATS callback: queue the event with the hooks of its pattern, or shed it."""
        entries = self._groups.get(pattern)
        if not entries:
            return
        self.stats.received += 1
        try:
            self._queue.put_nowait((entries, event))
        except asyncio.QueueFull:
            self.stats.shed += 1
            metrics.SHED.inc()
            return
        metrics.QUEUED.set(self._queue.qsize())

    async def _dispatch(self) -> None:
        while True:
            entries, event = await self._queue.get()
            metrics.QUEUED.set(self._queue.qsize())
            for entry in entries:
                await self._slots.acquire()
                self._active += 1
                self.stats.running_peak = max(self.stats.running_peak, self._active)
                task = asyncio.create_task(self._run(entry, event))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _run(self, entry: HookEntry, event: Event) -> None:
        metrics.RUNNING.inc()
        try:
            result = await self.runner.run(entry, event)
        finally:
            metrics.RUNNING.dec()
            self._active -= 1
            self._slots.release()
        self.stats.count(result)
        metrics.record(result)
        self._log(result, event)
        await record(self.bus, journal_entry(result, event))

    def _log(self, result: HookResult, event: Event) -> None:
        if result.outcome is Outcome.OK and not log.isEnabledFor(logging.INFO):
            return
        output = result.output.decode(errors="replace").rstrip()
        if result.output_bytes > len(result.output):
            output += f" [... {result.output_bytes - len(result.output)} more bytes not logged]"
        what = f"hook {result.hook_id} ({event.subject}, id {event.id})"
        if result.outcome is Outcome.REFUSED:
            self._refusal_log.warning("%s refused, not run: %s", what, result.reason)
        elif result.outcome is Outcome.OK:
            log.info("%s exit 0 in %.0f ms%s", what, result.duration * 1000, f": {output}" if output else "")
        else:
            log.warning(
                "%s %s after %.0f ms%s", what, result.reason, result.duration * 1000, f": {output}" if output else ""
            )

    async def stop(self) -> None:
        """Stop taking events, let running hooks finish within the drain bound, then kill their groups."""
        await self.hooks.stop()
        async with self._sync_lock:
            self._stopping = True
            for sub in self._subs.values():
                await sub.unsubscribe(timeout=1.0)
            self._subs.clear()
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
        self._shed_queued()
        await self._drain()

    def _shed_queued(self) -> None:
        """Events still queued at shutdown will not run: count them as shed."""
        while not self._queue.empty():
            self._queue.get_nowait()
            self.stats.shed += 1
            metrics.SHED.inc()
        metrics.QUEUED.set(0)

    async def _drain(self) -> None:
        tasks = set(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.drain_timeout)
        if pending:
            killed = self.runner.kill_all()
            log.warning(
                "%d hooks still running after %.1fs; killed %d process groups", len(pending), self.drain_timeout, killed
            )
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=2.0)

    async def __aenter__(self) -> ShellWorker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class _Enqueue:
    """The subscription handler of one pattern (a named callable for logs and tracebacks)."""

    def __init__(self, worker: ShellWorker, pattern: str) -> None:
        self.worker = worker
        self.pattern = pattern
        self.__qualname__ = f"ShellWorker.enqueue[{pattern}]"

    def __call__(self, event: Event) -> None:
        self.worker.enqueue(self.pattern, event)
