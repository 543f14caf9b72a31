"""The kernel's live view of the middleware: who serves what, trusted or not, in which order.

Built from watches on the registry, trust and guard buckets (:mod:`bus.middleware.registry`,
:mod:`bus.middleware.guards`), rebuilt when a declaration, an approval, a guard record or
a module's liveness changes, and swapped in whole, so ``Bus.intercept`` reads
``chains[stage]`` without locks or network. Stages nobody declared are absent
from ``chains``.

Trust comes before order: only runnable handlers (managed, or trusted as
declared) and held guards take part in a chain. A trusted fail-closed handler
with a guard record and no live approved instance *holds* its stage: every
call is cancelled at once, without a request. An instance is judged dead only
when the server confirms it did not beat (never because of this kernel's own
disconnect or a stalled watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bus.core.catalog import closest
from bus.core.declaration import Declaration
from bus.core.errors import BrokenChain, ForeignAnnouncement, HookbusError, RegistryError, TooManyHandlers
from bus.core.stages import Stage
from bus.core.subjects import BROKEN_CLEARED, BROKEN_SET, MODULE_ATTACHED, MODULE_DETACHED
from bus.middleware.faults import Outcome
from bus.middleware.guards import GUARDS_BUCKET, GuardRecord, parse_record
from bus.middleware.kernel.chain import order_with_bag
from bus.middleware.registry import (
    LIVENESS_FACTOR,
    MAX_HANDLERS,
    MODULES_BUCKET,
    MODULES_MAX_AGE,
    TRUST_BUCKET,
    Announcement,
    Watch,
    open_bucket,
    parse_announcement,
    request_subject,
)
from bus.middleware.rejections import parse_rejected, rejected_handler
from bus.middleware.switches import DEFAULT as DEFAULT_SWITCHES
from bus.middleware.switches import Switches, parse_switches, switched_handler
from bus.middleware.trust import (
    Managed,
    TrustState,
    approved_identity,
    first_approved,
    state_of,
    trust_key,
    trust_record,
)
from bus.runtime.tasks import TaskSet, stop_if_cancelled
from bus.transport.kv import Bucket
from bus.transport.port import Port

log = logging.getLogger("hookbus.middleware")
#: When a view of this process last logged a module's departure (several views share one log, and each
#: sees it at its own moment): said again only after this many seconds.
_GONE_SAID: dict[str, float] = {}
_GONE_SAID_FOR_S: Final = 60.0

#: Longest pause between liveness checks (shorter when a module beats faster).
SWEEP_EVERY: Final = 0.5
#: How long a liveness check waits for the server before it counts as this kernel's own trouble.
CONFIRM_TIMEOUT: Final = 2.0
_BUILT_IN: Final = frozenset(stage.value for stage in Stage)

#: Called with (subject, payload) for the events the view reports: broken chains, modules attached/detached.
Notify = Callable[[str, dict[str, Any]], None]
#: Called with (registry key, why) for an announcement refused as impersonation.
Denied = Callable[[str, str], None]
#: Called with (stage, why) when a chain's order drops the bag's edges (a cycle among them).
Noted = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class Link:
    """One handler in a stage's chain, with what the kernel needs to call it."""

    decl: Declaration
    subject: str
    batch: bool
    trust: TrustState
    match: frozenset[str] | None  # canonical names the handler wants; None: every call
    identity: str  # the declaration's hash (trust, journal)
    #: For a held guard (no live approved instance): why each call it wants is cancelled, and the outcome.
    hold: str | None = None
    outcome: Outcome = Outcome.OK
    #: The agents it is granted to (None: every agent, global).
    agents: frozenset[str] | None = None
    #: Whether it takes only some calls by context (a ``when`` or grants): checked per call, before any request.
    scoped: bool = False

    def in_scope(self, ctx: Mapping[str, Any]) -> bool:
        """Whether a call with this context reaches the handler (its grants and its ``when``)."""
        if self.agents is not None:
            agent = ctx.get("agent")
            if not isinstance(agent, str) or agent not in self.agents:
                return False
        return self.decl.when.matches(ctx)


@dataclass(frozen=True, slots=True)
class StageChain:
    stage: str
    links: tuple[Link, ...]
    broken: str | None = None
    #: Gone or replaced trusted fail-closed handlers: a call any of them wants is cancelled at once.
    holds: tuple[Link, ...] = ()
    #: Declared handlers that may not run (untrusted, modified): journaled as denied, never called.
    waiting: tuple[Link, ...] = ()
    #: In a broken chain, the trusted fail-closed handler whose promise makes its calls cancel.
    guard: str | None = None
    #: Runnable handlers an operator disabled: never called, never holding (``hookbus enable`` restores them).
    disabled: tuple[Link, ...] = ()
    #: Why the order is not what the declarations ask (the bag's edges made a cycle and were dropped).
    note: str | None = None
    #: Whether a handler of the chain reads or writes the bag (the kernel then keeps the session's bag).
    bag: bool = False
    #: Declared versions an operator rejected (``hookbus reject``): never called, not in the approval queue.
    rejected: tuple[Link, ...] = ()


class View:
    """Watches the registry, the trust store and the guard records; keeps ``chains`` current."""

    def __init__(
        self,
        port: Port,
        *,
        managed: Managed,
        trust_new: bool,
        aliases: Mapping[str, str],
        notify: Notify | None = None,
        on_denied: Denied | None = None,
        liveness_factor: float = LIVENESS_FACTOR,
        on_note: Noted | None = None,
    ) -> None:
        self._port = port
        self.managed = managed
        self.trust_new = trust_new
        self.aliases = dict(aliases)
        self.liveness_factor = liveness_factor
        self._notify = notify
        self._on_denied = on_denied
        self._on_note = on_note
        self._notes: dict[str, str] = {}
        #: Registry keys already reported for claiming another module's name (reported once each).
        self._denied_keys: set[str] = set()
        self.chains: dict[str, StageChain] = {}
        self.instances: dict[str, tuple[Announcement, float]] = {}
        self.approved: dict[str, str] = {}
        #: qualname -> Unix time first approved: equal priorities run in this order.
        self.first_approved: dict[str, float] = {}
        #: qualname -> the operator's switches (absent: enabled, global).
        self.switches: dict[str, Switches] = {}
        #: qualname -> the identities an operator rejected (``hookbus reject``): never queued, never called.
        self.rejected: dict[str, frozenset[str]] = {}
        self.guards: dict[str, GuardRecord] = {}
        self._revisions: dict[str, int] = {}  # registry revision of each instance's latest beat
        self._heard: dict[str, float] = {}  # Unix time each instance was last heard of
        self._gone_at: dict[str, float] = {}  # module -> Unix time its last instance was last heard of
        self._modules: set[str] = set()
        self._broken: dict[str, str] = {}
        self._watches: list[Watch] = []
        self._modules_watch: Watch | None = None
        self._modules_kv: Bucket | None = None
        self._tasks: TaskSet[None] = TaskSet()
        self._trust_kv: Bucket | None = None
        self.guards_kv: Bucket | None = None
        self._started = False
        self._changed = asyncio.Event()
        self.generation = 0

    async def start(self) -> None:
        self._trust_kv = await open_bucket(self._port, TRUST_BUCKET)
        self.guards_kv = await open_bucket(self._port, GUARDS_BUCKET)
        self._modules_kv = await open_bucket(self._port, MODULES_BUCKET)
        self._modules_watch = Watch(self._modules_kv, self._on_module)
        self._watches = [
            Watch(self._trust_kv, self._on_trust),
            Watch(self.guards_kv, self._on_guard),
            self._modules_watch,
        ]
        for watch in self._watches:
            await watch.start()
        self._started = True
        self._drop_dead()
        self._modules = self._live_modules()  # present at start: not reported as attached
        self._rebuild()
        self._spawn(self._sweep())

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        for watch in self._watches:
            await watch.stop()

    def _spawn(self, coro: object) -> None:
        self._tasks.start(coro)  # type: ignore[arg-type]

    # -- what the watches deliver

    def _on_module(self, key: str, data: bytes | None, revision: int) -> None:
        known = self.instances.get(key)
        if data is None:
            if self._forget(key, time.time()):
                self._rebuild()
            return
        try:
            ann = parse_announcement(data, key)
            if known is None or known[0] != ann:
                self._check_module_cap(key, ann)
        except TooManyHandlers as exc:
            if key not in self._denied_keys:  # it beats every heartbeat: say it once
                self._denied_keys.add(key)
                log.error("registry entry %s refused whole: %s", key, exc)
            if self._forget(key, time.time()):
                self._rebuild()
            return
        except ForeignAnnouncement as exc:
            if key not in self._denied_keys:  # it beats every heartbeat: say it once
                self._denied_keys.add(key)
                log.error("registry entry %s claims another module's name (%s): ignored", key, exc)
                if self._on_denied is not None:
                    self._on_denied(key, str(exc))
            return
        except (ValueError, KeyError, TypeError, HookbusError) as exc:
            log.warning("registry entry %s is malformed (%s): ignored", key, exc)
            return
        self.instances[key] = (ann, self._seen(ann))
        self._revisions[key] = max(revision, self._revisions.get(key, 0))
        self._heard[key] = time.time() if self._started else (ann.at or time.time())
        if known is None or known[0] != ann:
            self._rebuild()

    def _check_module_cap(self, key: str, ann: Announcement) -> None:
        """Refuse ``ann`` if its module's live instances would declare more than MAX_HANDLERS handlers, or
        more than two versions' worth of them (old and new side by side in a rolling deploy)."""
        versions = set(zip((decl.qualname for decl in ann.declarations), ann.identities, strict=True))
        for other, (known, _) in self.instances.items():
            if other != key and known.module == ann.module:
                versions.update(zip((decl.qualname for decl in known.declarations), known.identities, strict=True))
                if len(versions) > 2 * MAX_HANDLERS:
                    break
        names = {qualname for qualname, _ in versions}
        if len(names) > MAX_HANDLERS or len(versions) > 2 * MAX_HANDLERS:
            raise TooManyHandlers(
                f"module {ann.module} would declare {len(names)} handlers ({len(versions)} versions) with it, "
                f"over the cap of {MAX_HANDLERS} ({2 * MAX_HANDLERS} versions)"
            )

    def _seen(self, ann: Announcement) -> float:
        """When the instance was last heard of: now, or for what was stored before the watch began,
        back-dated by the announcement's age, so long-dead instances are not called at start-up."""
        now = time.monotonic()
        if self._started or not ann.at:
            return now
        return now - min(max(0.0, time.time() - ann.at), MODULES_MAX_AGE)

    def _on_trust(self, key: str, data: bytes | None, revision: int) -> None:
        switched = switched_handler(key)
        if switched is not None:
            self._on_switch(switched, data)
            return
        rejected = rejected_handler(key)
        if rejected is not None:
            self._on_rejected(rejected, data)
            return
        identity = approved_identity(data)
        if identity is None:
            self.approved.pop(key, None)
            self.first_approved.pop(key, None)
        else:
            self.approved[key] = identity
            first = first_approved(data)
            if first is None:
                self.first_approved.pop(key, None)
            else:
                self.first_approved[key] = first
        self._rebuild()

    def _on_rejected(self, qualname: str, data: bytes | None) -> None:
        try:
            identities = parse_rejected(data)
        except ValueError as exc:
            log.warning("rejection record of %s is malformed (%s): ignored", qualname, exc)
            return
        if identities:
            self.rejected[qualname] = identities
        else:
            self.rejected.pop(qualname, None)
        self._rebuild()

    def _on_switch(self, qualname: str, data: bytes | None) -> None:
        try:
            switches = parse_switches(data)
        except ValueError as exc:
            log.warning("switch record of %s is malformed (%s): ignored", qualname, exc)
            return
        if switches == DEFAULT_SWITCHES:
            self.switches.pop(qualname, None)
        else:
            self.switches[qualname] = switches
        self._rebuild()

    def _on_guard(self, key: str, data: bytes | None, revision: int) -> None:
        if data is None and revision == 0 and key in self.guards:
            # gone without a delete marker (purged, or missing from a new watch): what erased it is not the
            # record's writer nor the operator, so the guard holds on (docs/security.md, Integrity)
            log.error("guard record %s vanished from %s without a detach: still enforced", key, GUARDS_BUCKET)
            return
        if data is None:
            self.guards.pop(key, None)
        else:
            try:
                self.guards[key] = parse_record(key, data)
            except ValueError as exc:
                log.warning("%s: ignored", exc)
                return
        self._rebuild()

    # -- liveness

    async def _sweep(self) -> None:
        """Drop instances the server confirms stopped beating; a killed module leaves within a bound.

        Silence heard while this kernel itself was cut off from NATS says nothing
        about the modules: after our own disconnect every instance gets a fresh
        liveness window instead of being dropped, and an instance that looks
        silent is dropped only once the registry confirms it has no newer beat
        (a stalled watch or an unanswered check keeps it).
        """
        stats = self._port.stats
        reconnects = stats.reconnects
        while True:
            beats = [ann.heartbeat for ann, _ in self.instances.values()]
            await asyncio.sleep(min([SWEEP_EVERY, *beats]))
            if not self._port.connected or stats.reconnects != reconnects:
                reconnects = stats.reconnects
                self._refresh_seen()
                continue
            if await self._confirm_dead(self._silent()):
                self._rebuild()
            stop_if_cancelled()  # a cancel during a liveness check's request can be swallowed (Python 3.11)

    def _refresh_seen(self) -> None:
        now = time.monotonic()
        self.instances = {key: (ann, now) for key, (ann, _) in self.instances.items()}

    def _silent(self) -> list[str]:
        now = time.monotonic()
        factor = self.liveness_factor
        return [key for key, (ann, seen) in self.instances.items() if now - seen > factor * ann.heartbeat]

    async def _confirm_dead(self, keys: list[str]) -> bool:
        """Ask the registry about silent instances; drop those it confirms; True if any was dropped."""
        dropped = False
        stalled = False
        for key in keys:
            verdict = await self._check(key)
            if verdict is None:
                continue  # no answer: our own trouble says nothing about the module
            if verdict:
                stalled = True  # it did beat: the watch missed it
            elif key in self.instances:
                log.info("module instance %s stopped beating: no longer called", key)
                dropped |= self._forget(key, self._heard.get(key, time.time()))
        if stalled and self._modules_watch is not None:
            self._spawn(self._modules_watch.restart())
        return dropped

    async def _check(self, key: str) -> bool | None:
        """True if the registry holds a newer beat of ``key`` (taken in), False if none, None if unknown."""
        assert self._modules_kv is not None
        try:
            async with asyncio.timeout(CONFIRM_TIMEOUT):
                entry = await self._modules_kv.get(key)
        except (RegistryError, TimeoutError, OSError):
            return None
        if entry is None:
            return False
        revision, known = entry.revision, self._revisions.get(key, 0)
        if revision < known:
            return None  # a replica behind what the watch gave us: it proves nothing
        if revision == known or not entry.value:
            return False
        self._on_module(key, entry.value, revision)  # heard of now, unless the new value is malformed
        return self._revisions.get(key) == revision

    def _drop_dead(self) -> bool:
        """At start: drop what the stored announcements' own times say is long dead."""
        dead = self._silent()
        for key in dead:
            log.info("module instance %s stopped beating: no longer called", key)
            self._forget(key, self._heard.get(key, time.time()))
        return bool(dead)

    def _forget(self, key: str, heard: float) -> bool:
        found = self.instances.pop(key, None)
        self._revisions.pop(key, None)
        self._heard.pop(key, None)
        if found is None:
            return False
        module = found[0].module
        if not any(ann.module == module for ann, _ in self.instances.values()):
            self._gone_at[module] = heard
        return True

    def _live_modules(self) -> set[str]:
        return {ann.module for ann, _ in self.instances.values()}

    # -- the chains

    def declarations(self) -> dict[str, tuple[Declaration, Announcement]]:
        """Every live handler by qualified name (the newest announcement wins between replicas)."""
        out: dict[str, tuple[Declaration, Announcement]] = {}
        for ann, _ in sorted(self.instances.values(), key=lambda pair: pair[1]):
            for decl in ann.declarations:
                out[decl.qualname] = (decl, ann)
        return out

    def trust_of(self, decl: Declaration) -> TrustState:
        return state_of(decl, self.approved.get(trust_key(decl)), self.managed)

    def _rebuild(self) -> None:
        if not self._started:
            return
        live = self._live_by_identity()
        records: dict[str, list[GuardRecord]] = {}
        for rec in self.guards.values():
            records.setdefault(rec.decl.qualname, []).append(rec)
        by_stage: dict[str, _Parts] = {}
        for qualname in sorted(live.keys() | records.keys()):  # trust_new approves in name order: every run alike
            self._place(qualname, live.get(qualname, {}), records.get(qualname, []), by_stage)
        known = frozenset(live) | frozenset(self.approved) | frozenset(records)
        first = self.first_approved
        self.chains = {stage: parts.chain(stage, known, first) for stage, parts in by_stage.items()}
        self._report_broken(self.chains)
        self._report_notes(self.chains)
        self._report_modules()
        self.generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _live_by_identity(self) -> dict[str, dict[str, tuple[Declaration, Announcement]]]:
        """qualname -> identity -> (declaration, newest announcement declaring it)."""
        out: dict[str, dict[str, tuple[Declaration, Announcement]]] = {}
        for ann, _ in sorted(self.instances.values(), key=lambda pair: pair[1]):
            for decl, identity in zip(ann.declarations, ann.identities, strict=True):
                out.setdefault(decl.qualname, {})[identity] = (decl, ann)
        return out

    def _place(
        self,
        qualname: str,
        live: dict[str, tuple[Declaration, Announcement]],
        records: list[GuardRecord],
        by_stage: dict[str, _Parts],
    ) -> None:
        """Put one handler where it belongs: a runnable link, a hold, the disabled or the waiting list.

        A disabled handler neither runs nor holds: disabling is the operator's explicit act.
        """
        newest = next(reversed(live.items())) if live else None
        enabled = self.switches.get(qualname, DEFAULT_SWITCHES).enabled
        if newest is not None and self.managed.covers(newest[1][0]):
            identity, (decl, ann) = newest
            parts = self._parts(by_stage, decl.stage)
            link = self._link(decl, ann, TrustState.MANAGED, identity)
            (parts.runs if enabled else parts.disabled).append(link)
            return
        if newest is None and records and self.managed.covers(records[0].decl):
            rec = max(records, key=lambda r: r.at)
            if enabled:
                self._parts(by_stage, rec.decl.stage).holds.append(self._hold(rec, None, TrustState.MANAGED))
            return
        approved = self.approved.get(qualname)
        others = [(identity, pair) for identity, pair in live.items() if identity != approved]
        if approved is not None and approved in live:
            decl, ann = live[approved]
            parts = self._parts(by_stage, decl.stage)
            link = self._link(decl, ann, TrustState.TRUSTED, approved)
            (parts.runs if enabled else parts.disabled).append(link)
        elif enabled:
            attached = next((r for r in records if r.identity == approved), None)
            if attached is not None:  # an attached guard with no approved instance alive: it holds its stage
                hold = self._hold(attached, others[-1][1][0] if others else None, TrustState.TRUSTED)
                self._parts(by_stage, attached.decl.stage).holds.append(hold)
        if others:  # versions nobody approved: visible, never called, never ordered
            identity, (decl, ann) = others[-1]
            if identity in self.rejected.get(qualname, ()):  # the operator said no to this version
                link = self._link(decl, ann, TrustState.REJECTED, identity)
                self._parts(by_stage, decl.stage).rejected.append(link)
                return
            state = TrustState.UNTRUSTED if approved is None else TrustState.MODIFIED
            if state is TrustState.UNTRUSTED and self.trust_new:
                self._spawn(self._approve_new(decl))
            self._parts(by_stage, decl.stage).waiting.append(self._link(decl, ann, state, identity))

    @staticmethod
    def _parts(by_stage: dict[str, _Parts], stage: str) -> _Parts:
        parts = by_stage.get(stage)
        if parts is None:
            parts = by_stage[stage] = _Parts()
        return parts

    def _link(self, decl: Declaration, ann: Announcement, trust: TrustState, identity: str) -> Link:
        """One handler's link: its identity and request subject as its announcement computed them once."""
        match = frozenset(self.aliases.get(name, name) for name in decl.match) if decl.match else None
        agents = self.switches.get(decl.qualname, DEFAULT_SWITCHES).agents
        scoped = agents is not None or bool(decl.when)
        return Link(decl, request_subject(ann), ann.batch, trust, match, identity, agents=agents, scoped=scoped)

    def _hold(self, rec: GuardRecord, changed: Declaration | None, trust: TrustState) -> Link:
        decl = rec.decl
        match = frozenset(self.aliases.get(name, name) for name in decl.match) if decl.match else None
        if changed is not None:
            reason, outcome = f"{decl.qualname} changed, waiting for approval", Outcome.CHANGED
        else:
            reason, outcome = f"{decl.qualname} is {self._gone_text(rec)}", Outcome.ABSENT
        agents = self.switches.get(decl.qualname, DEFAULT_SWITCHES).agents
        scoped = agents is not None or bool(decl.when)
        return Link(decl, "", False, trust, match, rec.identity, reason, outcome, agents, scoped)

    def gone_since(self, rec: GuardRecord) -> float | None:
        """Unix time the guard's module was last heard of, as well as this kernel knows it."""
        known = [t for t in (self._gone_at.get(rec.decl.module), rec.stopped_at) if t]
        return max(known) if known else None

    def _gone_text(self, rec: GuardRecord) -> str:
        since = self.gone_since(rec)
        if since is None:
            return f"gone (it last started at {_clock(rec.at)})"
        return f"gone since {_clock(since)}"

    def similar_stage(self, stage: str) -> str | None:
        """For a stage neither built in nor declared: a declared stage it is probably a typo of."""
        if stage in _BUILT_IN or stage in self.chains:
            return None
        return closest(stage, self.chains, cutoff=0.85)

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait (up to ``timeout``) until ``predicate()`` holds, checking after each rebuild."""
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._changed.wait()

    # -- what the view reports

    def _report_broken(self, chains: dict[str, StageChain]) -> None:
        now_broken = {stage: chain.broken for stage, chain in chains.items() if chain.broken}
        for stage, reason in now_broken.items():
            if self._broken.get(stage) != reason:
                guard = chains[stage].guard
                if guard:
                    log.error("middleware chain of %s broken: %s; calls cancelled (%s)", stage, reason, guard)
                else:
                    log.error("middleware chain of %s disabled: %s; its handlers are not called", stage, reason)
                self._emit(BROKEN_SET, {"stage": stage, "reason": reason})
        for stage in self._broken.keys() - now_broken.keys():
            log.warning("middleware chain of %s works again", stage)
            self._emit(BROKEN_CLEARED, {"stage": stage})
        self._broken = now_broken

    def _report_notes(self, chains: dict[str, StageChain]) -> None:
        """Say once (per change) that a stage's order dropped its bag edges."""
        notes = {stage: chain.note for stage, chain in chains.items() if chain.note}
        for stage, note in notes.items():
            if self._notes.get(stage) != note:
                log.warning("middleware chain of %s: %s", stage, note)
                if self._on_note is not None:
                    self._on_note(stage, note)
        self._notes = notes

    def _report_modules(self) -> None:
        """eva.module.attached when a module appears; eva.module.detached when one leaves without a guard."""
        now = self._live_modules()
        held = {link.decl.module for chain in self.chains.values() for link in chain.holds}
        for module in sorted(now - self._modules):
            self._emit(MODULE_ATTACHED, {"module": module})
        for module in sorted(self._modules - now):
            if module in held:
                said = _GONE_SAID.get(module)
                clock = time.monotonic()
                if said is not None and clock - said < _GONE_SAID_FOR_S:
                    continue  # another view of this process said it (hookbus up runs several): one line per fact
                _GONE_SAID[module] = clock
                log.error(
                    "module %s is gone: its fail-closed handlers cancel their stages until it is back "
                    "or detached (hookbus detach %s)",
                    module,
                    module,
                )
            else:
                self._emit(MODULE_DETACHED, {"module": module, "reason": "gone"})
        self._modules = now

    def _emit(self, subject: str, payload: dict[str, Any]) -> None:
        if self._notify is not None:
            self._notify(subject, payload)

    # -- writes an operator (or trust_new) makes

    async def approve(self, decl: Declaration, how: str = "approved") -> None:
        """Write ``decl``'s current identity to the trust store (what ``hookbus approve`` does)."""
        assert self._trust_kv is not None
        key = trust_key(decl)
        previous = await self._trust_kv.get(key)
        await self._trust_kv.put(key, trust_record(decl, how, previous.value if previous else None))

    async def _approve_new(self, decl: Declaration) -> None:
        """trust_new: approve a never-seen handler (create fails if someone approved meanwhile)."""
        assert self._trust_kv is not None
        with contextlib.suppress(RegistryError):
            if await self._trust_kv.create(trust_key(decl), trust_record(decl, "trust-new")):
                log.warning("trust_new: approved new handler %s on first sight", decl.qualname)


@dataclass
class _Parts:
    """One stage's handlers while a chain is built."""

    runs: list[Link] = field(default_factory=list)
    holds: list[Link] = field(default_factory=list)
    waiting: list[Link] = field(default_factory=list)
    disabled: list[Link] = field(default_factory=list)
    rejected: list[Link] = field(default_factory=list)

    def chain(self, stage: str, known: frozenset[str], first: Mapping[str, float]) -> StageChain:
        members = {link.decl.qualname: link for link in self.runs}
        held = tuple(sorted(self.holds, key=lambda link: link.decl.qualname))
        waiting = tuple(sorted(self.waiting, key=lambda link: link.decl.qualname))
        disabled = tuple(sorted(self.disabled, key=lambda link: link.decl.qualname))
        rejected = tuple(sorted(self.rejected, key=lambda link: link.decl.qualname))
        decls = [link.decl for link in self.runs] + [link.decl for link in held]
        try:
            ordered, note = order_with_bag(stage, decls, known, first)
        except BrokenChain as exc:
            guards = sorted(decl.qualname for decl in decls if decl.fail_closed)
            guard = guards[0] if guards else None
            return StageChain(stage, (), exc.reason, held, waiting, guard, disabled, rejected=rejected)
        links = tuple(members[decl.qualname] for decl in ordered if decl.qualname in members)
        bag = any(link.decl.inputs or link.decl.outputs for link in links)
        return StageChain(stage, links, None, held, waiting, None, disabled, note, bag, rejected)


def _clock(moment: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(moment))
