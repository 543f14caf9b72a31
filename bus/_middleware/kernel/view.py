"""The kernel's live view of the middleware: who serves what, trusted or not, in which order.

Built from watches on the registry, trust and guard buckets (:mod:`bus._middleware.registry`,
:mod:`bus._middleware.guards`), rebuilt when a declaration, an approval, a guard record or
a module's liveness changes, and swapped in whole, so ``Bus.intercept`` reads
``chains[stage]`` without locks or network. Stages nobody declared are absent
from ``chains``.

Trust comes before order: only runnable handlers (managed, or trusted as
declared) and held guards take part in a chain. A trusted fail-closed handler
with a guard record and no live approved instance *holds* its stage: every
call is cancelled at once, without a request. An instance is dead when a call
meets no responders (:meth:`View.absent`, bus/_middleware/kernel/absence.py),
or silent past its liveness window once the server confirms it did not put
again (never because of this kernel's own disconnect or a stalled watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

from bus._core.catalog import closest
from bus._core.declaration import Declaration
from bus._core.errors import ForeignAnnouncement, HookbusError, RegistryError, TooManyHandlers
from bus._core.stages import Stage
from bus._core.subjects import RULES_BUCKET
from bus._middleware.faults import Outcome
from bus._middleware.guards import GUARDS_BUCKET, GuardRecord
from bus._middleware.kernel.absence import Absences, probe
from bus._middleware.kernel.chain import ChainParts, StageChain
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.reports import Noted, Notify, Reports
from bus._middleware.kernel.rule_links import RulePlacer
from bus._middleware.kernel.trust_records import TrustRecords
from bus._middleware.registry import (
    LIVENESS_FACTOR,
    MODULES_BUCKET,
    MODULES_MAX_AGE,
    TRUST_BUCKET,
    Announcement,
    Watch,
    check_module_cap,
    open_bucket,
    parse_announcement,
    request_subject,
)
from bus._middleware.rules.book import RuleBook
from bus._middleware.switches import DEFAULT as DEFAULT_SWITCHES
from bus._middleware.switches import Switches
from bus._middleware.trust import Managed, TrustState, state_of, trust_key, trust_record
from bus._runtime.tasks import TaskSet, stop_if_cancelled
from bus._transport.kv import Bucket
from bus._transport.port import Port

log = logging.getLogger("hookbus.middleware")

#: Longest pause between liveness checks (shorter when a module beats faster).
SWEEP_EVERY: Final = 0.5
#: How long a liveness check waits for the server before it counts as this kernel's own trouble.
CONFIRM_TIMEOUT: Final = 2.0
_BUILT_IN: Final = frozenset(stage.value for stage in Stage)

#: Called with (registry key, why) for an announcement refused as impersonation.
Denied = Callable[[str, str], None]


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
        rules: RuleBook | None = None,
    ) -> None:
        self._port = port
        self.managed = managed
        self.trust_new = trust_new
        self.aliases = dict(aliases)
        self.liveness_factor = liveness_factor
        self._on_denied = on_denied
        self._reports = Reports(notify, on_note)
        #: Registry keys already reported for claiming another module's name (reported once each).
        self._denied_keys: set[str] = set()
        self.chains: dict[str, StageChain] = {}
        self.instances: dict[str, tuple[Announcement, float]] = {}
        #: What the trust and guard buckets hold; its dicts are read here under the same names.
        self.trust = TrustRecords()
        self.approved = self.trust.approved
        self.first_approved = self.trust.first_approved
        self.switches = self.trust.switches
        self.rejected = self.trust.rejected
        self.guards = self.trust.guards
        self._revisions: dict[str, int] = {}  # registry revision of each instance's latest beat
        self._heard: dict[str, float] = {}  # Unix time each instance was last heard of
        self._gone_at: dict[str, float] = {}  # module -> Unix time its last instance was last heard of
        #: Instances a call found absent (no responders), until they are back (bus/_middleware/kernel/absence.py).
        self._absent = Absences()
        self._watches: list[Watch] = []
        self._modules_watch: Watch | None = None
        self._modules_kv: Bucket | None = None
        self._tasks: TaskSet[None] = TaskSet()
        self._trust_kv: Bucket | None = None
        self.guards_kv: Bucket | None = None
        self._started = False
        self._changed = asyncio.Event()
        self.generation = 0
        self.rules = RulePlacer(rules or RuleBook(), trust_new=trust_new, aliases=self.aliases)

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
        rules_watch = await self._rules_watch()
        if rules_watch is not None:
            self._watches.append(rules_watch)
        for watch in self._watches:
            await watch.start()
        self._started = True
        self._drop_dead()
        self._reports.modules = self._live_modules()  # present at start: not reported as attached
        self._rebuild()
        self._spawn(self._sweep())

    async def _rules_watch(self) -> Watch | None:
        """The watch of the rules bucket (a rule file per key): hot reload, the last good file kept.

        None (logged) where the bucket cannot be had (JetStream refuses it): the fleet's rules are then
        not in force here, and the kernel says so once.
        """
        self.rules.trust_kv = self._trust_kv
        try:
            kv = await open_bucket(self._port, RULES_BUCKET)
        except RegistryError as exc:
            log.warning("the %s bucket cannot be read (%s): the fleet's rules are not in force here", RULES_BUCKET, exc)
            return None
        return Watch(kv, self._on_rules)

    def _on_rules(self, key: str, data: bytes | None, revision: int) -> None:
        if self.rules.book.on_file(key, data):
            self._rebuild()

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
            self._absent.discard(key)
            if self._forget(key, time.time()):
                self._rebuild()
            return
        if self._absent.still_absent(key, revision):
            return  # the announcement a call already found absent, delivered again
        try:
            ann = parse_announcement(data, key)
            if known is None or known[0] != ann:
                check_module_cap(self.instances, key, ann)
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

    def _seen(self, ann: Announcement) -> float:
        """When the instance was last heard of: now, or for what was stored before the watch began,
        back-dated by the announcement's age, so long-dead instances are not called at start-up."""
        now = time.monotonic()
        if self._started or not ann.at:
            return now
        return now - min(max(0.0, time.time() - ann.at), MODULES_MAX_AGE)

    def _on_trust(self, key: str, data: bytes | None, revision: int) -> None:
        if data is None:
            self.rules.trust_raw.pop(key, None)
        else:
            self.rules.trust_raw[key] = data
        if self.trust.on_trust(key, data):
            self._rebuild()

    def _on_guard(self, key: str, data: bytes | None, revision: int) -> None:
        if self.trust.on_guard(key, data, revision):
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
            beats = [ann.interval for ann, _ in self.instances.values()]
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
        now, factor = time.monotonic(), self.liveness_factor
        return [key for key, (ann, seen) in self.instances.items() if now - seen > factor * ann.interval]

    async def _confirm_dead(self, keys: list[str]) -> bool:
        """Ask the registry about silent instances; drop those it confirms; True if any was dropped."""
        dropped = stalled = False
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

    def absent(self, subject: str) -> None:
        """A call to ``subject`` met no responders: its instances are absent now (a held guard holds at once),
        probed until one answers (back as it was); a newer put brings it back too, a delete ends it."""
        keys = [key for key, (ann, _) in self.instances.items() if request_subject(ann) == subject]
        now = time.time()
        for key in keys:
            self._absent.add(key, self.instances[key][0], self._revisions.get(key, 0))
            log.info("module instance %s meets no responders: absent", key)
            self._forget(key, now)
        if keys:
            self._rebuild()
            self._spawn(self._probe(subject, keys))

    async def _probe(self, subject: str, keys: list[str]) -> None:
        if await probe(self._port, subject, lambda: any(key in self._absent.known for key in keys)):
            for key, (ann, revision) in [(k, self._absent.known.pop(k)) for k in keys if k in self._absent.known]:
                if key not in self.instances:  # back as it was
                    self.instances[key], self._revisions[key] = (ann, time.monotonic()), revision
                    self._heard[key] = time.time()
            self._rebuild()

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
        by_stage: dict[str, ChainParts] = {}
        rules = self.rules.place(
            lambda stage: self._parts(by_stage, stage), self.approved, self.rejected, self.switches
        )
        for name in self.rules.new:
            self._spawn(self.rules.approve_new(name))
        self.rules.new.clear()
        # trust_new approves in name order (every run alike); a module's handler named as a rule is left out
        for qualname in sorted((live.keys() | records.keys()) - rules):
            self._place(qualname, live.get(qualname, {}), records.get(qualname, []), by_stage)
        known = frozenset(live) | frozenset(self.approved) | frozenset(records)
        first = self.first_approved
        self.chains = {stage: parts.chain(stage, known, first) for stage, parts in by_stage.items()}
        self._reports.report(self.chains, self._live_modules())
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
        by_stage: dict[str, ChainParts],
    ) -> None:
        """Put one handler where it belongs: a runnable link, a hold, the disabled or the waiting list.

        A disabled handler neither runs nor holds: disabling is the operator's explicit act.
        """
        newest = next(reversed(live.items())) if live else None
        switched = self.switches.get(qualname, DEFAULT_SWITCHES)
        enabled = switched.enabled
        holding = enabled and not switched.shadow  # a guard in shadow never bites, gone or not
        if newest is not None and self.managed.covers(newest[1][0]):
            identity, (decl, ann) = newest
            parts = self._parts(by_stage, decl.stage)
            link = self._link(decl, ann, TrustState.MANAGED, identity)
            (parts.runs if enabled else parts.disabled).append(link)
            return
        if newest is None and records and self.managed.covers(records[0].decl):
            rec = max(records, key=lambda r: r.at)
            if holding:
                self._parts(by_stage, rec.decl.stage).holds.append(self._hold(rec, None, TrustState.MANAGED))
            return
        approved = self.approved.get(qualname)
        others = [(identity, pair) for identity, pair in live.items() if identity != approved]
        if approved is not None and approved in live:
            decl, ann = live[approved]
            parts = self._parts(by_stage, decl.stage)
            link = self._link(decl, ann, TrustState.TRUSTED, approved)
            (parts.runs if enabled else parts.disabled).append(link)
        elif holding:
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
    def _parts(by_stage: dict[str, ChainParts], stage: str) -> ChainParts:
        parts = by_stage.get(stage)
        if parts is None:
            parts = by_stage[stage] = ChainParts()
        return parts

    def _link(self, decl: Declaration, ann: Announcement, trust: TrustState, identity: str) -> Link:
        """One handler's link: its identity and request subject as its announcement computed them once."""
        match, switched, scoped = self._scope(decl)
        return Link(
            decl, request_subject(ann), ann.batch, trust, match, identity, None, Outcome.OK, switched.agents, scoped,
            shadow=switched.shadow,
        )  # fmt: skip

    def _scope(self, decl: Declaration) -> tuple[frozenset[str] | None, Switches, bool]:
        """A handler's canonical matcher, its switches, and whether it is scoped (grants or ``when``)."""
        match = frozenset(self.aliases.get(name, name) for name in decl.match) if decl.match else None
        switched = self.switches.get(decl.qualname, DEFAULT_SWITCHES)
        return match, switched, switched.agents is not None or bool(decl.when)

    def _hold(self, rec: GuardRecord, changed: Declaration | None, trust: TrustState) -> Link:
        decl = rec.decl
        match, switched, scoped = self._scope(decl)
        if changed is not None:
            reason, outcome = f"{decl.qualname} changed, waiting for approval", Outcome.CHANGED
        else:
            reason, outcome = f"{decl.qualname} is {self._gone_text(rec)}", Outcome.ABSENT
        return Link(decl, "", False, trust, match, rec.identity, reason, outcome, switched.agents, scoped)

    def gone_since(self, rec: GuardRecord) -> float | None:
        """Unix time the guard's module was last heard of, as well as this kernel knows it."""
        known = [t for t in (self._gone_at.get(rec.decl.module), rec.stopped_at) if t]
        return max(known) if known else None

    def _gone_text(self, rec: GuardRecord) -> str:
        since = self.gone_since(rec)
        return f"gone (it last started at {_clock(rec.at)})" if since is None else f"gone since {_clock(since)}"

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


def _clock(moment: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(moment))
