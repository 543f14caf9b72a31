"""The plugin worker: feed each WASM plugin the events of its patterns, one call at a time, bounded.

It runs beside the shell-hook worker (``hookbus up``, ``hookbus worker``) and
shares its queue-group namespace: all the patterns of one plugin subscribe in
one queue group of their own (``key_queue(queue, "plugin:<name>")``), so an
event matching several of a plugin's patterns reaches it once (the union), and
workers on many machines share each plugin's events. Without a queue (``--queue
''``) the group is this worker's own, for the same union. Each plugin is a lane:
the NATS callback only enqueues (full: shed and counted), and the lane's
dispatcher calls the plugin in a thread, stopping it at its time limit. A
run is counted like a shell hook's (hook ``plugin:<name>``, its pattern as the
event: ``/api/hooks/metrics`` and the ``hookbus_shell_hook_*`` series) and
journaled as a ``shell_hook`` entry with phase ``plugin``, after one entry
with phase ``log`` per line it logged (at most ``MAX_LINES_PER_CALL``, and one
counting the rest: ``subscribers.plugins._plugin_log``); ``Err`` and traps are
logged. Nothing a plugin does reaches the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bus._client import Bus, Subscription
from bus._core.envelope import Event
from bus._core.subjects import key_queue, matches
from bus._journal.entries import JournalEntry, publish_entry
from bus._runtime.tasks import TaskSet
from bus._runtime.visible import visible
from bus._sandbox.outcome import HookOutcome
from bus._service import ServiceContext
from subscribers.plugins._bus_services import BusServices
from subscribers.plugins._errors import PluginTrap
from subscribers.plugins._manifest import PLUGINS_DIR
from subscribers.plugins._plugin_log import dropped_cause
from subscribers.plugins._plugin_set import PluginSet
from subscribers.plugins._threads import DaemonThreads
from subscribers.shell_hooks import _hook_metrics as hook_metrics
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks._shell import HookResult, hook_payload
from subscribers.shell_hooks.shell_worker import WorkerStats
from subscribers.shell_hooks.shell_worker import journal_entry as hook_journal_entry

if TYPE_CHECKING:
    from subscribers.plugins._host import PluginCode

log = logging.getLogger("hookbus.plugins")

#: The hook id a plugin's runs are counted and journaled under.
HOOK_PREFIX: Final = "plugin:"
#: How long past its time limit (or the worker's stop) a call may take to end before it is left behind:
#: wasm code traps at its next loop or call at once; a host call that waits (WASI preview 2's clocks) may not.
GRACE_S: Final = 1.0
#: The threads of calls no worker passes its own (``hookbus plugins test``): daemons, never joined at exit.
_THREADS: Final = DaemonThreads("hookbus-plugin")


def plugin_hook_id(name: str) -> str:
    return f"{HOOK_PREFIX}{name}"


async def call_plugin(
    code: PluginCode,
    event: Event,
    pattern: str,
    threads: Executor | None = None,
    stopping: asyncio.Event | None = None,
) -> HookResult:
    """Run one event through ``code`` in a thread of ``threads``, interrupted at the plugin's time limit; never raises.

    A worker passes threads of its own: plugins spinning to their time limits
    must not hold the loop's default threads (the journal sink's writes, shell
    hooks' waits and file reloads of ``hookbus up`` use those). The result
    comes at the time limit (or ``GRACE_S`` after ``stopping`` is set) at the
    latest: a call still inside a host call by then is left behind in its
    daemon thread (it traps when the host call returns) and reported as
    stopped; the plugin's next events are refused until it has ended.
    """
    manifest = code.manifest
    hook_id = plugin_hook_id(manifest.name)
    started = time.monotonic()
    payload = (await hook_payload(event)).decode(errors="replace")
    loop = asyncio.get_running_loop()
    limit_s = manifest.timeout_ms / 1000
    deadline = loop.call_later(limit_s, code.interrupt)
    until = time.monotonic() + limit_s
    call = loop.run_in_executor(threads or _THREADS, code.call, event.event, payload, until, event.depth)
    try:
        error = await _wait_bounded(call, manifest.timeout_ms, stopping)
    except PluginTrap as trap:
        outcome = HookOutcome.TIMEOUT if trap.timed_out else HookOutcome.FAILED
        return HookResult(hook_id, pattern, outcome, 0, time.monotonic() - started, reason=trap.reason)
    finally:
        deadline.cancel()
    duration = time.monotonic() - started
    if error is None:
        return HookResult(hook_id, pattern, HookOutcome.OK, 0, duration)
    return HookResult(hook_id, pattern, HookOutcome.FAILED, 0, duration, reason=f"Err: {error}")


async def _wait_bounded(
    call: asyncio.Future[str | None], timeout_ms: int, stopping: asyncio.Event | None
) -> str | None:
    """The call's result, or PluginTrap ``GRACE_S`` past the time limit or past ``stopping`` being set."""
    stop = asyncio.ensure_future(stopping.wait()) if stopping is not None else None
    waiting: set[asyncio.Future[Any]] = {call, stop} if stop is not None else {call}
    try:
        limit_s = timeout_ms / 1000 + GRACE_S
        done, _ = await asyncio.wait(waiting, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        if call not in done and stop is not None and stop in done:
            done, _ = await asyncio.wait({call}, timeout=GRACE_S)
            if call not in done:
                raise PluginTrap("stopped: the worker is stopping (left inside a host call)")
        if call not in done:
            reason = f"stopped at its time limit of {timeout_ms} ms (left inside a host call)"
            raise PluginTrap(reason, timed_out=True)
        return call.result()
    finally:
        if stop is not None:
            stop.cancel()


def journal_entry(result: HookResult, event: Event) -> JournalEntry:
    """What a plugin run did, for the shared journal: a shell-hook entry with phase ``plugin``."""
    return hook_journal_entry(result, event, phase="plugin")


class PluginWorker:
    """Runs the WASM plugins of one workspace, fed from the bus."""

    def __init__(self, bus: Bus, workspace: Path, settings: WorkerSettings | None = None) -> None:
        self.bus = bus
        self.settings = settings = settings or WorkerSettings()
        self.queue = settings.queue or f"hookbus-plugins-{uuid.uuid4().hex[:12]}"
        self.plugins = PluginSet(workspace / PLUGINS_DIR, self._on_change, settings.poll_interval_s)
        self.stats = WorkerStats()
        self._lanes: dict[str, _Lane] = {}
        #: (plugin, pattern) -> subscription
        self._subs: dict[tuple[str, str], Subscription] = {}
        self._sync_lock = asyncio.Lock()
        self._tasks: TaskSet[None] = TaskSet()
        self._started = False
        self._stopping = False
        #: The plugins' calls (one per plugin at a time), apart from the loop's default threads.
        self._threads = DaemonThreads("hookbus-plugin")
        self._stop_event = asyncio.Event()

    def queue_of(self, name: str) -> str:
        """The queue group every pattern of plugin ``name`` subscribes in."""
        return key_queue(self.queue, plugin_hook_id(name))

    async def start(self) -> PluginWorker:
        hook_metrics.register_metrics()
        self._started = True
        self.plugins.start()
        await self._sync()
        return self

    async def reload(self) -> bool:
        """Look at the plugin folders now; True if what runs changed."""
        changed = self.plugins.check()
        await self._sync()
        return changed

    def _on_change(self) -> None:
        if self._started:
            self._tasks.start(self._sync())

    async def _sync(self) -> None:
        """Subscriptions and lanes to match the plugins that run now (a replaced plugin keeps its lane)."""
        async with self._sync_lock:
            if self._stopping:
                return
            running = self.plugins.running()
            wanted = {(name, pattern) for name, code in running.items() for pattern in code.manifest.patterns}
            for key in sorted(set(self._subs) - wanted):
                await self._subs.pop(key).unsubscribe(timeout=1.0)
            for name in sorted(set(self._lanes) - set(running)):
                await self._lanes.pop(name).close()
            added = sorted(wanted - set(self._subs))
            for name, pattern in added:
                lane = self._lanes.get(name) or self._lanes.setdefault(name, _Lane(self, name))
                self._subs[name, pattern] = await self.bus.subscribe(pattern, lane.enqueue, self.queue_of(name))
            if added:
                await self.bus.flush()

    def code_of(self, name: str) -> PluginCode | None:
        state = self.plugins.plugins.get(name)
        return state.code if state is not None else None

    async def run(self, name: str, event: Event) -> None:
        code = self.code_of(name)
        if code is None:
            return
        pattern = next((p for p in code.manifest.patterns if matches(p, event.subject)), event.subject)
        if not isinstance(code.services, BusServices):  # a new or reloaded plugin: kv and events on the bus
            code.services = BusServices(self.bus, asyncio.get_running_loop(), name, code.manifest.kv_bytes)
        result = await call_plugin(code, event, pattern, self._threads, self._stop_event)
        self.stats.count(result)
        hook_metrics.count_result(result)
        lines, dropped = code.logged.take(result.hook_id, event)
        if dropped:
            log.warning("plugin %s on %s: %s", name, event.subject, dropped_cause(dropped))
        if result.outcome is not HookOutcome.OK:
            reason = visible(result.reason or "")
            log.warning("plugin %s on %s (id %s): %s", name, event.subject, visible(event.id), reason)
        try:
            for entry in [*lines, journal_entry(result, event)]:
                await publish_entry(self.bus.port, entry)
        except Exception:
            log.exception("plugin %s on %s: could not journal the run", name, event.subject)

    async def stop(self) -> None:
        """Stop taking events; calls running now are stopped (their time limit brought forward) and journaled."""
        await self.plugins.stop()
        async with self._sync_lock:
            self._stopping = True
            for sub in self._subs.values():
                await sub.unsubscribe(timeout=1.0)
            self._subs.clear()
            lanes, self._lanes = list(self._lanes.values()), {}
        for code in self.plugins.running().values():
            code.shut_down()
        self._stop_event.set()
        await asyncio.gather(*(lane.close(self.settings.drain_timeout) for lane in lanes))
        tasks = set(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.drain_timeout)
        self._threads.shutdown(wait=False)

    async def __aenter__(self) -> PluginWorker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class _Lane:
    """One plugin's bounded queue and dispatcher: one call at a time, plugins never wait for each other."""

    def __init__(self, worker: PluginWorker, name: str) -> None:
        self.worker = worker
        self.name = name
        self.queue: asyncio.Queue[Event] = asyncio.Queue(worker.settings.queue_size)
        self.__qualname__ = f"PluginWorker.enqueue[{name}]"
        self._current: asyncio.Future[None] | None = None
        self._dispatcher = asyncio.create_task(self._dispatch(), name=f"plugin {name}")

    def enqueue(self, event: Event) -> None:
        """The NATS callback: queue the event, or shed it (this plugin's queue is full)."""
        stats = self.worker.stats
        stats.received += 1
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            stats.shed += 1
            stats.shed_by_key[plugin_hook_id(self.name)] += 1
            hook_metrics.SHED.inc()

    async def _dispatch(self) -> None:
        while True:
            event = await self.queue.get()
            self._current = asyncio.ensure_future(self._run(event))
            await asyncio.wait({self._current})  # a cancelled dispatcher leaves the run to finish (see close)

    async def _run(self, event: Event) -> None:
        try:
            await self.worker.run(self.name, event)
        except Exception:
            log.exception("plugin %s on %s could not run", self.name, event.subject)

    async def close(self, drain_timeout: float = 5.0) -> None:
        """Stop dispatching: queued events are shed; the call running now gets ``drain_timeout`` s to end, journaled."""
        self._dispatcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._dispatcher
        while not self.queue.empty():
            self.queue.get_nowait()
            self.worker.stats.shed += 1
            hook_metrics.SHED.inc()
        if self._current is not None and not self._current.done():
            await asyncio.wait({self._current}, timeout=drain_timeout)


@asynccontextmanager
async def service(ctx: ServiceContext, settings: WorkerSettings) -> AsyncIterator[None]:
    """The workspace's WASM plugins as a service of ``hookbus up``, beside the shell hooks."""
    plugins = PluginWorker(ctx.bus, ctx.workspace, settings)
    try:
        await plugins.start()
        ctx.lines.append(f"  plugins  {plugins.plugins.root} ({len(plugins.plugins.running())} running)")
        yield
    finally:
        await plugins.stop()
