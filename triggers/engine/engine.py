"""The trigger engine: events in, turn requests out, with the guards in between.

For each event on a trigger's pattern: its publisher (the NATS user its
subject vouches for, one the trigger accepts: by default the target agent's
own), the filter, then the recursion depth (the turn would run at event
depth + 1; at the limit it is not started), then debounce (wait for quiet,
keep the last event), then dedupe, cooldown and the in-flight limit. Debounce,
dedupe and cooldown are kept per publisher, so one publisher's events never
suppress another's; the in-flight limit bounds the agent's load and is the
trigger's. Every firing and every suppression goes to the journal with
its reason, and to metrics. Replicas share each trigger's events through a
queue group of that trigger's own, so each event is judged, and each turn
started, once per trigger it matches; the guards' state is each replica's own.

A claimed event (its whole payload in the object store, the envelope carrying
a preview) is judged and rendered on its whole payload, fetched and checked
once per trigger that reads ``payload`` fields; the turn request still carries
the envelope as received. When the whole payload cannot be had (refused
reference, missing object, bytes not what the reference names) the trigger is
judged on the preview, and the log and the journal entry say so and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge
from prometheus_client.registry import REGISTRY, CollectorRegistry

from bus._client import Bus, Subscription
from bus._core.clock import now_timestamp
from bus._core.envelope import Event
from bus._core.errors import HookbusError, PayloadRefError
from bus._core.subjects import key_queue
from bus._journal.entries import JournalEntry, publish_entry
from bus._metrics import register_once
from bus._runtime.filewatch import WatchedFile
from bus._runtime.tasks import TaskSet
from bus._service import ServiceContext
from bus._transport.port import TRANSPORT_FAILURES, RawMessage
from bus._turns.server import TurnRequest
from triggers.agent._books import grant_turn
from triggers.engine import _config as config
from triggers.engine._config import TriggerSpec
from triggers.engine._request import fit_request
from triggers.engine._subjects import TRIGGERS_QUEUE, TRIGGERS_STATUS

log = logging.getLogger("hookbus.triggers")

QUEUE: Final = TRIGGERS_QUEUE
STATUS_SUBJECT: Final = TRIGGERS_STATUS
#: Dedupe keys remembered per trigger before the oldest are forgotten.
MAX_DEDUPE_KEYS: Final = 10_000
#: Seconds budget grants pause after one could not be written (no books: `hookbus up` not run, or no JetStream).
GRANTS_RETRY_S: Final = 30.0
#: Dedupe keys longer than this (characters) are remembered by their SHA-256, so a whole payload cannot fill memory.
MAX_KEY_CHARS: Final = 256
#: Characters of a refusal kept in a journal cause.
MAX_NOTE_CHARS: Final = 300
#: Publishers whose guards one trigger remembers before the least recently seen is forgotten.
MAX_PUBLISHERS: Final = 1024

FIRED = PromCounter("hookbus_trigger_fired", "Turns started by a trigger.", ["trigger"], registry=None)
SUPPRESSED = PromCounter(
    "hookbus_trigger_suppressed",
    "Trigger events that did not start a turn, by reason "
    "(publisher, filter, depth, debounce, dedupe, cooldown, in_flight, disabled).",
    ["trigger", "reason"],
    registry=None,
)
IN_FLIGHT = Gauge(
    "hookbus_trigger_turns_in_flight",
    "Turns a trigger started that have not reported their end.",
    ["trigger"],
    registry=None,
)


def register_metrics(registry: CollectorRegistry = REGISTRY) -> None:
    """Expose these metrics on ``registry``; the service calls it when it starts (importing registers nothing)."""
    register_once(
        (
            FIRED,
            SUPPRESSED,
            IN_FLIGHT,
        ),
        registry,
    )


@dataclass(frozen=True, slots=True)
class Seen:
    """An event as a trigger judges it: ``event`` as received (what the turn request carries) and ``view``,
    what filters and templates read (``event`` with its whole payload when it was claimed and could be had)."""

    event: Event
    view: Event
    #: Why ``view`` is the preview of a claimed event (appended to the journal cause); None otherwise.
    note: str | None = None


def reads_payload(spec: TriggerSpec) -> bool:
    """True when a filter or template of ``spec`` reads a ``payload`` field (only then is a claimed payload fetched)."""
    paths = [condition.path for condition in spec.conditions] + list(spec.prompt.fields)
    if spec.dedupe is not None:
        paths += spec.dedupe.fields
    return any(path.split(".", 1)[0] == "payload" for path in paths)


def _remembered(key: str) -> str:
    """The dedupe key as remembered: itself, or its SHA-256 when long."""
    return key if len(key) <= MAX_KEY_CHARS else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclass
class PublisherGuards:
    """One publisher's debounce, dedupe and cooldown state for one trigger."""

    last_fired_at: float = float("-inf")
    seen_keys: dict[str, float] = field(default_factory=dict)  # dedupe key -> expiry
    debounce: asyncio.TimerHandle | None = None


@dataclass
class TriggerState:
    """What the engine remembers about one trigger."""

    fired: int = 0
    suppressed: Counter[str] = field(default_factory=Counter)
    last_fired: str | None = None
    in_flight: dict[str, float] = field(default_factory=dict)  # request id -> deadline
    reads_payload: bool = False
    #: Per vouched publisher (None: unvouched events), least recently seen first.
    guards: dict[str | None, PublisherGuards] = field(default_factory=dict)

    def of(self, publisher: str | None) -> PublisherGuards:
        """``publisher``'s guards (made on first sight; the least recently seen forgotten past MAX_PUBLISHERS)."""
        guards = self.guards.pop(publisher, None)
        if guards is None:
            guards = PublisherGuards()
            if len(self.guards) >= MAX_PUBLISHERS:
                oldest = self.guards.pop(next(iter(self.guards)))
                if oldest.debounce is not None:
                    oldest.debounce.cancel()
        self.guards[publisher] = guards
        return guards

    @property
    def debounce(self) -> asyncio.TimerHandle | None:
        """A debounce timer still pending, any publisher's, or None."""
        return next((g.debounce for g in self.guards.values() if g.debounce is not None), None)


class TriggerEngine:
    """Runs a set of triggers on one bus; ``apply`` swaps the set (hot reload)."""

    def __init__(self, bus: Bus, queue: str = QUEUE) -> None:
        self.bus = bus
        self.queue = queue
        self.specs: dict[str, TriggerSpec] = {}
        self.state: dict[str, TriggerState] = {}
        self._subs: dict[str, Subscription] = {}
        self._inbox = ""
        self._tasks: TaskSet[None] = TaskSet()
        #: Budget grants are not written before this (monotonic) time: the books were missing a moment ago.
        self._grants_after = 0.0

    async def start(self) -> TriggerEngine:
        register_metrics()
        self._inbox = self.bus.port.new_inbox()
        await self.bus.port.subscribe_raw(f"{self._inbox}.*", self._on_turn_result)
        await self.bus.port.subscribe_raw(STATUS_SUBJECT, self._on_status)
        return self

    async def apply(self, specs: dict[str, TriggerSpec]) -> None:
        """Subscribe new and changed triggers, drop removed ones; state of unchanged ones stays."""
        for name in list(self._subs):
            if specs.get(name) != self.specs.get(name):
                await self._subs.pop(name).unsubscribe()
        for name, spec in specs.items():
            self.state.setdefault(name, TriggerState()).reads_payload = reads_payload(spec)
            if name not in self._subs:
                queue = key_queue(self.queue, name) if self.queue else None  # one group per trigger: overlaps all fire
                self._subs[name] = await self.bus.subscribe(spec.pattern, self._handler(name), queue=queue)
        for gone in set(self.state) - set(specs):
            del self.state[gone]
        self.specs = dict(specs)
        log.info("triggers: %s", ", ".join(specs) or "none")

    def _handler(self, name: str) -> Any:
        async def on_event(event: Event) -> None:
            spec = self.specs.get(name)
            if spec is not None:
                await self.on_event(spec, event)

        return on_event

    def judge(self, spec: TriggerSpec, event: Event) -> str | None:
        """The reason this event cannot fire ``spec`` before any guard state: disabled, filter, depth."""
        if not spec.enabled:
            return "disabled"
        if not spec.accepts(event.publisher, self.bus.publisher is not None):
            return "publisher"
        for condition in spec.conditions:
            if not condition.holds(event):
                return "filter"
        if event.depth + 1 >= self.bus.max_depth:
            return "depth"
        return None

    async def seen(self, spec: TriggerSpec, event: Event) -> Seen:
        """``event`` as ``spec`` judges it: with its whole payload if claimed and read, else as received."""
        state = self.state.get(spec.name)
        if event.payload_ref is None or state is None or not state.reads_payload:
            return Seen(event, event)
        try:
            whole = await event.full_payload()
        except PayloadRefError as exc:
            log.warning("trigger %s: event %s judged on its preview: %s", spec.name, event.id, exc)
            return Seen(event, event, f"on the preview, the whole payload was refused: {exc}"[:MAX_NOTE_CHARS])
        return Seen(event, dataclasses.replace(event, payload=whole, truncated=False))

    async def on_event(self, spec: TriggerSpec, event: Event) -> None:
        seen = await self.seen(spec, event)
        reason = self.judge(spec, seen.view)
        if reason is not None:
            await self._suppress(spec, seen, reason, self._cause(reason, event))
            return
        if spec.debounce_s <= 0:
            await self._fire_guarded(spec, seen)
            return
        guards = self.state[spec.name].of(event.publisher)
        if guards.debounce is not None:
            guards.debounce.cancel()
            await self._suppress(spec, seen, "debounce", "replaced by a later event")
        loop = asyncio.get_running_loop()
        guards.debounce = loop.call_later(spec.debounce_s, self._debounced, spec, seen, guards)

    def _cause(self, reason: str, event: Event) -> str | None:
        if reason == "depth":
            return f"turn would run at depth {event.depth + 1}, the limit is {self.bus.max_depth}"
        if reason == "publisher":
            return f"published by {event.publisher or 'an unvouched publisher'}, not one this trigger accepts"
        return None

    def _debounced(self, spec: TriggerSpec, seen: Seen, guards: PublisherGuards) -> None:
        guards.debounce = None
        self._tasks.start(self._fire_guarded(spec, seen))

    async def _fire_guarded(self, spec: TriggerSpec, seen: Seen) -> None:
        state = self.state.get(spec.name)
        if state is None:  # removed by a reload meanwhile
            return
        now = time.monotonic()
        guards = state.of(seen.event.publisher)
        key = _remembered(spec.dedupe.render(seen.view)) if spec.dedupe else None
        if key is not None and guards.seen_keys.get(key, 0.0) > now:
            await self._suppress(spec, seen, "dedupe", f"key {key!r} already fired")
            return
        if now - guards.last_fired_at < spec.cooldown_s:
            await self._suppress(spec, seen, "cooldown", f"fired {now - guards.last_fired_at:.1f}s ago")
            return
        for request_id, deadline in list(state.in_flight.items()):
            if deadline <= now:
                del state.in_flight[request_id]
        if len(state.in_flight) >= spec.max_in_flight:
            await self._suppress(spec, seen, "in_flight", f"{len(state.in_flight)} turns still running")
            return
        if key is not None:
            if len(guards.seen_keys) >= MAX_DEDUPE_KEYS:
                guards.seen_keys.pop(next(iter(guards.seen_keys)))
            guards.seen_keys[key] = now + spec.dedupe_window_s
        guards.last_fired_at = now
        await self._fire(spec, seen, state)

    async def _fire(self, spec: TriggerSpec, seen: Seen, state: TriggerState) -> None:
        event = seen.event
        request = TurnRequest(
            agent=spec.agent,
            prompt=spec.prompt.render(seen.view),
            depth=event.depth + 1,
            trigger=spec.name,
            event=dict(event.to_dict()),  # the envelope as received: preview and reference, never the whole
            session_id=event.session_id,
            publisher=event.publisher,
        )
        request = fit_request(request, self.bus.max_bytes)  # the agent refuses a request over the limit
        state.in_flight[request.id] = time.monotonic() + spec.turn_timeout
        state.last_fired = now_timestamp()
        state.fired += 1
        FIRED.labels(spec.name).inc()
        IN_FLIGHT.labels(spec.name).set(len(state.in_flight))
        await self.bus.request_turn(request, reply=f"{self._inbox}.{spec.name}")
        granted = request.publisher is not None or request.session_id is not None
        if granted and time.monotonic() >= self._grants_after:
            self._tasks.start(self._grant(request.publisher, spec.agent, request.session_id))
        cause = f"turn {request.id} on agent {spec.agent}"
        await self._journal(spec, seen, "fired", f"{cause}; {seen.note}" if seen.note else cause)

    async def _grant(self, user: str | None, agent: str, session: str | None) -> None:
        """Let the agent's spending count in the user's and session's budget books today (triggers/agent/_books.py)."""
        try:
            await grant_turn(self.bus, user, agent, session=session)
        except HookbusError as exc:
            self._grants_after = time.monotonic() + GRANTS_RETRY_S
            log.warning("triggers: budget grant of %s for %s not written (%s)", agent, user, exc)

    async def _suppress(self, spec: TriggerSpec, seen: Seen, reason: str, cause: str | None = None) -> None:
        state = self.state.get(spec.name)
        if state is not None:
            state.suppressed[reason] += 1
        SUPPRESSED.labels(spec.name, reason).inc()
        said = "; ".join(part for part in (cause, seen.note) if part)
        await self._journal(spec, seen, "suppressed", f"{reason}: {said}" if said else reason)

    async def _journal(self, spec: TriggerSpec, seen: Seen, decision: str, cause: str) -> None:
        event = seen.event
        entry = JournalEntry(
            kind="trigger",
            point=event.subject,
            phase="fire",
            who=spec.name,
            decision=decision,
            cause=cause,
            session=event.session_id,
            agent=spec.agent,
            depth=event.depth,
            trace_id=event.id,
        )
        await publish_entry(self.bus.port, entry)

    async def _on_turn_result(self, msg: RawMessage) -> None:
        name = msg.subject.rsplit(".", 1)[-1]
        request_id = None
        if len(msg.data) <= self.bus.max_bytes:
            with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError):
                request_id = orjson.loads(msg.data)["id"]
        if type(request_id) is not str:
            self.bus.stats.dropped.add("malformed")
            log.warning("triggers: unreadable turn result on %r", msg.subject)
            return
        state = self.state.get(name)
        if state is not None and state.in_flight.pop(request_id, None) is not None:
            IN_FLIGHT.labels(name).set(len(state.in_flight))

    def status(self) -> list[dict[str, Any]]:
        """Each trigger with its state, as ``hookbus triggers`` shows it."""
        out = []
        for name, spec in self.specs.items():
            state = self.state[name]
            out.append(
                {
                    "name": name,
                    "on": spec.on,
                    "agent": spec.agent,
                    "enabled": spec.enabled,
                    "fired": state.fired,
                    "last_fired": state.last_fired,
                    "in_flight": len(state.in_flight),
                    "suppressed": dict(state.suppressed),
                }
            )
        return out

    async def _on_status(self, msg: RawMessage) -> None:
        if msg.reply:
            with contextlib.suppress(*TRANSPORT_FAILURES):
                await self.bus.port.publish_raw(msg.reply, orjson.dumps({"triggers": self.status()}))

    async def stop(self) -> None:
        for state in self.state.values():
            for guards in state.guards.values():
                if guards.debounce is not None:
                    guards.debounce.cancel()
        for sub in self._subs.values():
            await sub.unsubscribe()
        self._subs.clear()
        for task in list(self._tasks):
            task.cancel()


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """``hookbus up`` runs the triggers of its workspace, reloading triggers.yaml when it changes."""
    engine = await TriggerEngine(ctx.bus).start()
    path = ctx.workspace / config.FILE_NAME
    watched: WatchedFile[dict[str, TriggerSpec]] = WatchedFile(path, config.load, engine.apply, {})
    await watched.check()
    stop = asyncio.Event()
    task = asyncio.create_task(watched.run(stop), name="triggers-reload")
    ctx.lines.append(f"  triggers {path} ({len(engine.specs)} loaded, reloaded on change)")
    try:
        yield
    finally:
        stop.set()
        await task
        await engine.stop()
