"""The shell-hook worker: subscribe to what hooks.json names, run the hooks, bounded.

One subscription per event key (NATS pattern) of hooks.json, each in a queue
group of its own (``key_queue(queue, pattern)``), so that workers on many
machines share each key's events (each key's hooks run on one worker:
at-most-once) and an event matching several keys runs every key's hooks: NATS
gives a message to one member of a group whatever its pattern, so keys sharing
one group would split it. Each key is a lane of its own: the NATS callback
only enqueues into the key's bounded queue (full: the event is shed and
counted), and the key's dispatcher starts each hook once one of the key's
``max_procs`` process slots is free. So the worker never forks without bound,
its memory is bounded by ``queue_size`` per key, and a slow or flooded key
never delays or sheds another. The actions of one event run concurrently and
independently. A change to hooks.json changes the subscriptions in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bus._client import Bus, Subscription
from bus._core.envelope import Event
from bus._core.subjects import key_queue
from bus._journal.entries import JournalEntry, output_tail, publish_entry
from bus._runtime import tracing as _tracing
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.tasks import TaskSet
from bus._runtime.visible import visible, visible_lines
from bus._sandbox.outcome import HookOutcome
from bus._service import ServiceContext
from subscribers.shell_hooks import _hook_metrics as hook_metrics
from subscribers.shell_hooks._hooks_config import HookEntry, HooksConfig
from subscribers.shell_hooks._hooks_file import HOOKS_FILE, HooksFile
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks._shell import HookResult, ShellRunner

log = logging.getLogger("hookbus.shell")


@dataclass
class WorkerStats:
    """What this worker did, as plain numbers (Prometheus has the per-hook view)."""

    received: int = 0
    shed: int = 0
    #: Events shed, per event key (each key sheds only its own).
    shed_by_key: Counter[str] = field(default_factory=Counter)
    runs: int = 0
    failures: int = 0
    timeouts: int = 0
    refusals: int = 0
    running_peak: int = 0

    def count(self, result: HookResult) -> None:
        if result.outcome is HookOutcome.REFUSED:
            self.refusals += 1
            return
        if result.exit_code is not None:
            self.runs += 1
        if result.outcome is HookOutcome.TIMEOUT:
            self.timeouts += 1
        elif result.outcome is HookOutcome.FAILED:
            self.failures += 1


Job = tuple[tuple[HookEntry, ...], Event]


def journal_entry(result: HookResult, event: Event, phase: str = "run") -> JournalEntry:
    """What a hook run did, for the shared journal (never the payload it was given): with its output's tails.

    ``phase`` says what ran: ``run`` a shell hook, ``plugin`` a WASM plugin (no output: no tails).
    """
    return JournalEntry(
        kind="shell_hook",
        point=event.subject,
        phase=phase,
        who=result.hook_id,
        decision=result.outcome.value,
        cause=result.reason,
        duration_ms=round(result.duration * 1000, 3),
        session=event.session_id,
        depth=event.depth,
        trace_id=event.id,
        stdout=output_tail(result.stdout),
        stderr=output_tail(result.stderr),
    )


class ShellWorker:
    """Runs the shell hooks of one workspace, fed from the bus."""

    def __init__(
        self,
        bus: Bus,
        workspace: Path,
        settings: WorkerSettings | None = None,
        *,
        nats_url: str | None = None,
    ) -> None:
        settings = settings or WorkerSettings()
        self.bus = bus
        self.settings = settings
        self.queue = settings.queue
        self.max_procs = settings.max_procs
        self.drain_timeout = settings.drain_timeout
        nats_url = nats_url or ",".join(bus.servers)
        self.runner = ShellRunner(
            workspace, nats_url=nats_url, kill_grace=settings.kill_grace_s, output_limit=settings.output_tail_bytes
        )
        self.hooks = HooksFile(workspace / HOOKS_FILE, self._on_config, settings.poll_interval_s)
        self.stats = WorkerStats()
        self.queue_size = settings.queue_size
        self._lanes: dict[str, _Lane] = {}
        self._queued = 0
        self._active = 0
        self._groups: dict[str, tuple[HookEntry, ...]] = {}
        self._subs: dict[str, Subscription] = {}
        self._sync_lock = asyncio.Lock()
        self._stopping = False
        self._tasks: TaskSet[None] = TaskSet()
        self._started = False
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
        hook_metrics.register_metrics()
        self._started = True
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
        self.runner.default_isolation = config.isolation
        log.info("hooks.json: %d hooks on %d patterns", len(config.entries), len(self._groups))
        if self._started:
            self._tasks.start(self._sync_subscriptions())

    async def _sync_subscriptions(self) -> None:
        """Subscribe to new patterns, unsubscribe from gone ones."""
        async with self._sync_lock:
            if self._stopping:
                return
            wanted = set(self._groups)
            for pattern in sorted(set(self._subs) - wanted):
                await self._subs.pop(pattern).unsubscribe(timeout=1.0)
                await self._lanes.pop(pattern).close()
            added = sorted(wanted - set(self._subs))
            for pattern in added:
                self._lanes[pattern] = _Lane(self, pattern)
                handler = _Enqueue(self, pattern)
                self._subs[pattern] = await self.bus.subscribe(pattern, handler, self.queue_of(pattern))
            if added:
                await self.bus.flush()  # the server has the subscriptions: "started" means receiving

    def queue_of(self, pattern: str) -> str | None:
        """The queue group of one key's subscription: its own within the worker's ``queue`` namespace."""
        return key_queue(self.queue, pattern) if self.queue else None

    def enqueue(self, pattern: str, event: Event) -> None:
        """The NATS callback: queue the event with the hooks of its key, or shed it (that key full)."""
        entries = self._groups.get(pattern)
        lane = self._lanes.get(pattern)
        if not entries or lane is None:
            return
        self.stats.received += 1
        try:
            lane.queue.put_nowait((entries, event))
        except asyncio.QueueFull:
            lane.count_shed()
            return
        self._count_queued(1)

    def _count_queued(self, change: int) -> None:
        self._queued += change
        hook_metrics.QUEUED.set(self._queued)

    def _start(self, lane: _Lane, entry: HookEntry, event: Event) -> None:
        """Run one hook in a slot of ``lane`` (already acquired)."""
        self._active += 1
        self.stats.running_peak = max(self.stats.running_peak, self._active)
        self._tasks.start(self._run(lane, entry, event))

    async def _run(self, lane: _Lane, entry: HookEntry, event: Event) -> None:
        hook_metrics.RUNNING.inc()
        try:
            # A span where this process traces (the hook gets it as TRACEPARENT), child of the emitter's.
            with _tracing.span(
                f"hookbus shell-hook {entry.id}",
                parent=event.traceparent,
                attributes={_tracing.ATTR_EVENT: event.subject, _tracing.ATTR_HOOK: entry.id},
                kind="CONSUMER",
            ) as span:
                result = await self.runner.run(entry, event)
                _tracing.note(span, _tracing.ATTR_OUTCOME, result.outcome.value)
        except Exception as exc:  # a bug or an OS failure: reported like a failed run, never left in the task
            log.exception("hook %s on %s could not run", entry.id, event.subject)
            result = HookResult(entry.id, entry.event, HookOutcome.FAILED, reason=f"{type(exc).__name__}: {exc}")
        finally:
            hook_metrics.RUNNING.dec()
            self._active -= 1
            lane.slots.release()
        self.stats.count(result)
        hook_metrics.count_result(result)
        try:
            self._log(result, event)
            await publish_entry(self.bus.port, journal_entry(result, event))
        except Exception:  # whatever the event held, the run is over: never an unretrieved task exception
            log.exception("hook %s on %s: could not log or journal the run", entry.id, event.subject)

    def _log(self, result: HookResult, event: Event) -> None:
        """One line for the run, then one line per output line, escaped and prefixed with the hook id."""
        if result.outcome is HookOutcome.OK and not log.isEnabledFor(logging.INFO):
            return
        what = f"hook {result.hook_id} ({event.subject}, id {visible(event.id)})"
        if result.outcome is HookOutcome.REFUSED:
            self._refusal_log.warning("%s refused, not run: %s", what, visible(result.reason or ""))
            return
        level = logging.INFO if result.outcome is HookOutcome.OK else logging.WARNING
        status = "exit 0" if result.outcome is HookOutcome.OK else result.reason
        log.log(level, "%s %s in %.0f ms", what, status, result.duration * 1000)
        for prefix, data, total in (
            ("|", result.stdout, result.stdout_bytes),
            ("stderr |", result.stderr, result.stderr_bytes),
        ):
            if total > len(data):
                log.log(level, "hook %s %s [... %d earlier bytes not kept]", result.hook_id, prefix, total - len(data))
            for line in visible_lines(data.decode(errors="replace")):
                log.log(level, "hook %s %s %s", result.hook_id, prefix, line)

    async def stop(self) -> None:
        """Stop taking events, let running hooks finish within the drain bound, then kill their groups."""
        await self.hooks.stop()
        async with self._sync_lock:
            self._stopping = True
            for sub in self._subs.values():
                await sub.unsubscribe(timeout=1.0)
            self._subs.clear()
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            await lane.close()
        await self._drain()

    async def _drain(self) -> None:
        tasks = set(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.drain_timeout)
        if pending:
            killed = self.runner.kill_all()
            log.warning(
                "%d hooks still running after %.1fs; killed %d process groups",
                len(pending),
                self.drain_timeout,
                killed,
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


class _Lane:
    """One event key's own queue, process slots and dispatcher: keys never wait for each other."""

    def __init__(self, worker: ShellWorker, pattern: str) -> None:
        self.worker = worker
        self.pattern = pattern
        self.queue: asyncio.Queue[Job] = asyncio.Queue(worker.queue_size)
        self.slots = asyncio.Semaphore(worker.max_procs)
        self._dispatcher = asyncio.create_task(self._dispatch(), name=f"shell hooks of {pattern}")

    async def _dispatch(self) -> None:
        while True:
            entries, event = await self.queue.get()
            self.worker._count_queued(-1)
            for entry in entries:
                await self.slots.acquire()
                self.worker._start(self, entry, event)

    async def close(self) -> None:
        """Stop dispatching; events still queued will not run and count as shed (running hooks go on)."""
        self._dispatcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._dispatcher
        while not self.queue.empty():
            self.queue.get_nowait()
            self.worker._count_queued(-1)
            self.count_shed()

    def count_shed(self) -> None:
        stats = self.worker.stats
        stats.shed += 1
        stats.shed_by_key[self.pattern] += 1
        hook_metrics.SHED.inc()
        self.worker.bus.stats.dropped.add("shed")  # reported to the fleet with the Bus's other drops


class HooksReload:
    """Look at hooks.json now in the running shell worker: what the hooks API calls after a write.

    ``hookbus up`` makes one and hands it to two services: the shell hooks' fills it, the API's calls it.
    """

    def __init__(self) -> None:
        self.worker: ShellWorker | None = None

    async def __call__(self) -> bool:
        return await self.worker.reload() if self.worker is not None else False


@asynccontextmanager
async def service(
    ctx: ServiceContext, settings: WorkerSettings, reload: HooksReload | None = None
) -> AsyncIterator[None]:
    """The workspace's shell hooks as a service of ``hookbus up``; ``reload`` reaches the worker while it runs."""
    worker = ShellWorker(ctx.bus, ctx.workspace, settings, nats_url=ctx.nats_url)
    await worker.start()
    try:
        if reload is not None:
            reload.worker = worker
        hooks = worker.hooks.path
        ctx.lines.append(f"  hooks    {hooks} ({len(worker.config.entries)} hooks, queue group {worker.queue or '-'})")
        yield
    finally:
        if reload is not None:
            reload.worker = None
        await worker.stop()
