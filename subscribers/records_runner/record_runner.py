"""``hookbus runner``: serves the approved, enabled handler records of the bus as one middleware module.

It watches the drafts, the approved copies and the trust store; after each
change it works out which version of each record to serve and which drafts
wait for approval, and announces them as two instances of its module
(:mod:`subscribers.records_runner._served`). An instance whose set of versions
changed is replaced by a new one that is answering before the old one stops,
so a swap loses no call. Each version is compiled once, only once approved.
A record that fails (raises, times out, answers garbage) ``max_failures``
times in a row is disabled: its approved copy says why, the journal says so,
and it is not served until a new version is approved. Several runners share
the load: equal versions make equal request subjects, one queue group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bus._client import Bus
from bus._core.errors import RecordError, RegistryError
from bus._core.subjects import GUARDS_BUCKET, TRUST_BUCKET
from bus._journal.entries import JournalEntry, publish_entry
from bus._middleware.faults import Outcome
from bus._middleware.guards import put_records
from bus._middleware.handler.serving import ModuleServer
from bus._middleware.registry import Watch, open_bucket
from bus._middleware.trust import approved_identity
from bus._records.execute import RecordRun
from bus._records.record import Record, parse_safely
from bus._records.sandbox import DEFAULT_IMPORTS, RecordHandler, compile_record
from bus._records.store import Approved, RecordStore, parse_approved
from bus._records.subjects import RECORDS_MODULE
from bus._runtime.tasks import TaskSet, stop_if_cancelled
from subscribers.records_runner._served import Entry, RecordSet

log = logging.getLogger("hookbus.records")

#: How long a new instance may take to be answering before the swap gives up (the old one keeps serving).
START_WITHIN_S: Final = 15.0
_FAULTS: Final = frozenset({Outcome.FAILED, Outcome.TIMEOUT, Outcome.INVALID})
#: Drafts announced as waiting at most (a flood of drafts must not make an announcement over the bus limit).
MAX_WAITING_ANNOUNCED: Final = 200
#: The fewest hex digits of an identity that pin a managed record (what ``hookbus records show`` prints).
MIN_PIN: Final = 12


@dataclass(frozen=True, slots=True)
class RecordsRunnerSettings:
    """What ``hookbus runner`` is told: its module name, what records may import, how it treats failures."""

    module: str = RECORDS_MODULE
    imports: frozenset[str] = DEFAULT_IMPORTS
    #: Records the operator ships, pinned by identity (name -> identity, or its first 12+ hex digits): that
    #: version is served without approval (``--managed NAME=IDENTITY``); any other version of the name waits.
    managed: Mapping[str, str] = field(default_factory=dict)
    max_failures: int = 5
    heartbeat: float = 1.0
    concurrency: int = 64

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise ValueError(f"max_failures must be at least 1, not {self.max_failures}")
        for name, pinned in self.managed.items():
            if len(pinned) < MIN_PIN or any(c not in "0123456789abcdef" for c in pinned):
                raise ValueError(f"managed record {name}: pin it by identity, {MIN_PIN}+ hex digits, not {pinned!r}")

    def pins(self, record: Record) -> bool:
        """Whether ``record`` is the very version the operator pinned with ``--managed``."""
        pinned = self.managed.get(record.name)
        return pinned is not None and record.identity(self.module).startswith(pinned)


@dataclass
class _Instance:
    served: RecordSet
    task: asyncio.Task[None]


@dataclass
class _State:
    drafts: dict[str, Record] = field(default_factory=dict)
    copies: dict[str, Approved] = field(default_factory=dict)
    trust: dict[str, str] = field(default_factory=dict)


class RecordsRunner:
    """Runs the records of one bus under one module name until stopped."""

    def __init__(self, bus: Bus, settings: RecordsRunnerSettings | None = None) -> None:
        self.bus = bus
        self.settings = settings or RecordsRunnerSettings()
        self.store = RecordStore(bus.port, self.settings.module)
        self.state = _State()
        self._compiled: dict[str, RecordHandler] = {}
        self._failures: dict[str, int] = {}
        self._instances: dict[str, _Instance] = {}
        self._watches: list[Watch] = []
        self._dirty = asyncio.Event()
        self._tasks: TaskSet[Any] = TaskSet()
        self.planned = 0  # plans carried out (tests wait on it)
        self.calls = 0  # record calls this runner answered
        self._planned = asyncio.Event()

    # -- life

    async def start(self) -> None:
        drafts = await self.store.drafts()
        approved = await self.store.approved_bucket()
        trust = await open_bucket(self.bus.port, TRUST_BUCKET)
        self._watches = [Watch(drafts, self._on_draft), Watch(approved, self._on_copy), Watch(trust, self._on_trust)]
        for watch in self._watches:
            await watch.start()
        await self._plan()
        self._tasks.start(self._planner())

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        for watch in self._watches:
            await watch.stop()
        for kind in list(self._instances):
            await self._end(self._instances.pop(kind))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[RecordsRunner]:
        await self.start()
        try:
            yield self
        finally:
            await self.stop()

    async def wait_planned(self, after: int, timeout: float = 10.0) -> None:
        """Wait until a plan later than ``after`` was carried out (tests, ``--once``)."""
        async with asyncio.timeout(timeout):
            while self.planned <= after:
                self._planned.clear()
                await self._planned.wait()

    @property
    def served(self) -> dict[str, str]:
        """Record name -> identity of the version this runner serves."""
        instance = self._instances.get("serving")
        if instance is None:
            return {}
        return {name: entry.identity for name, entry in instance.served.entries.items()}

    @property
    def waiting(self) -> dict[str, str]:
        """Record name -> identity of the drafts this runner announces as waiting for approval."""
        instance = self._instances.get("pending")
        if instance is None:
            return {}
        return {name: entry.identity for name, entry in instance.served.entries.items()}

    # -- what the watches deliver

    def _on_draft(self, key: str, data: bytes | None, revision: int) -> None:
        name = self.store.name_of(key)
        if name is None:
            return
        self.state.drafts.pop(name, None)
        if data is not None:
            try:
                self.state.drafts[name] = parse_safely(data, name)
            except RecordError as exc:
                log.warning("%s: ignored", exc)
        self._dirty.set()

    def _on_copy(self, key: str, data: bytes | None, revision: int) -> None:
        name = self.store.name_of(key)
        if name is None:
            return
        self.state.copies.pop(name, None)
        if data is not None:
            try:
                self.state.copies[name] = parse_approved(name, data)
            except RecordError as exc:
                log.warning("approved copy: %s: ignored", exc)
        self._dirty.set()

    def _on_trust(self, key: str, data: bytes | None, revision: int) -> None:
        identity = approved_identity(data)
        if identity is None:
            self.state.trust.pop(key, None)
        else:
            self.state.trust[key] = identity
        self._dirty.set()

    # -- planning

    async def _planner(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._plan()
            except RegistryError as exc:
                log.warning("records runner: could not apply a change (%s); retrying on the next one", exc)
            stop_if_cancelled()  # a cancel during a store request can be swallowed (Python 3.11)

    def _runs(self, record: Record, approved: str | None) -> bool:
        return self.settings.pins(record) or record.identity(self.settings.module) == approved

    async def _plan(self) -> None:
        serve: list[Entry] = []
        pending: list[Entry] = []
        module = self.settings.module
        state = self.state
        for name in sorted(state.drafts.keys() | state.copies.keys()):
            draft, copy = state.drafts.get(name), state.copies.get(name)
            approved = state.trust.get(f"{module}.{name}")
            chosen: Approved | None = None
            if draft is not None and self._runs(draft, approved):
                chosen = await self._keep(draft, copy)
            else:
                if (
                    copy is not None
                    and copy.identity == copy.record.identity(module)
                    and self._runs(copy.record, approved)
                ):
                    chosen = copy  # the approved version serves while the draft waits
                if draft is not None:
                    pending.append(Entry(draft, draft.declaration(module), None))
            if chosen is not None and chosen.record.enabled and chosen.disabled is None:
                handler = await self._compile(chosen.record)
                if handler is not None:
                    serve.append(Entry(chosen.record, chosen.record.declaration(module), handler))
        if len(pending) > MAX_WAITING_ANNOUNCED:
            log.warning(
                "records runner: %d drafts wait for approval; announcing the first %d by name",
                len(pending),
                MAX_WAITING_ANNOUNCED,
            )
            pending = pending[:MAX_WAITING_ANNOUNCED]
        await self._swap("serving", serve)
        await self._swap("pending", pending)
        self.planned += 1
        self._planned.set()

    def _still_approved(self, copy: Approved, approved: str | None) -> bool:
        """A copy serves only as the version the trust store approves (a forged copy has no effect)."""
        return copy.identity == copy.record.identity(self.settings.module) and self._runs(copy.record, approved)

    async def _keep(self, draft: Record, copy: Approved | None) -> Approved:
        """An approved draft: keep a copy of it (the runner serves from copies), unless one is kept already."""
        identity = draft.identity(self.settings.module)
        if copy is not None and copy.identity == identity:
            return copy
        kept = Approved(draft, identity, None, time.time())
        self.state.copies[draft.name] = kept
        await self.store.keep_approved(kept)
        return kept

    async def _compile(self, record: Record) -> RecordHandler | None:
        identity = record.identity(self.settings.module)
        handler = self._compiled.get(identity)
        if handler is None:
            try:
                handler = compile_record(record.name, record.source, self.settings.imports)
            except RecordError as exc:
                await self._disable(record, identity, str(exc))
                return None
            self._compiled[identity] = handler
        return handler

    # -- instances

    async def _swap(self, kind: str, entries: list[Entry]) -> None:
        old = self._instances.get(kind)
        wanted = frozenset(entry.identity for entry in entries)
        if old is not None and old.served.identities == wanted:
            return
        new: _Instance | None = None
        if entries:
            new = await self._begin(entries)
            if new is None:
                return  # the old instance keeps serving; the next change tries again
            self._instances[kind] = new
        else:
            self._instances.pop(kind, None)
        if old is not None:
            await self._end(old)
            if new is not None:  # the old one marked the guards both declare as stopped: they are not
                await self._guard(new.served)

    async def _begin(self, entries: list[Entry]) -> _Instance | None:
        settings = self.settings
        served = RecordSet(
            settings.module,
            entries,
            heartbeat=settings.heartbeat,
            concurrency=settings.concurrency,
            resolve=self._resolve,
            report=self._report,
        )
        ready = asyncio.Event()
        task = asyncio.get_running_loop().create_task(ModuleServer(served, self.bus).run(ready))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait({task, waiter}, timeout=START_WITHIN_S, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            waiter.cancel()
            task.cancel()
            await asyncio.gather(task, waiter, return_exceptions=True)
            log.error("records runner: a new instance of %s did not start", settings.module)
            return None
        return _Instance(served, task)

    async def _end(self, instance: _Instance) -> None:
        instance.task.cancel()
        await asyncio.gather(instance.task, return_exceptions=True)

    async def _guard(self, served: RecordSet) -> None:
        if any(decl.fail_closed for decl in served.declarations):
            with contextlib.suppress(RegistryError):
                await put_records(await open_bucket(self.bus.port, GUARDS_BUCKET), served.declarations)

    # -- calls

    async def _resolve(self, entry: Entry) -> RecordHandler | None:
        """A draft called at its instance: run it only if approved now (the trust store asked again)."""
        record = entry.record
        identity = entry.identity
        known = self.settings.pins(record) or self.state.trust.get(entry.decl.qualname) == identity
        if not known and await self.store.trusted(record.name) != identity:
            raise LookupError(f"{entry.decl.qualname} is waiting for approval")
        self._dirty.set()
        if not record.enabled:
            return None
        handler = await self._compile(record)
        if handler is None:
            raise LookupError(f"{entry.decl.qualname} does not load")
        return handler

    def _report(self, entry: Entry, ran: RecordRun) -> None:
        self.calls += 1
        identity = entry.identity
        if ran.outcome not in _FAULTS:
            self._failures.pop(identity, None)
            return
        count = self._failures[identity] = self._failures.get(identity, 0) + 1
        if count == self.settings.max_failures:
            reason = f"failed {count} times in a row (last: {ran.outcome.value}: {ran.cause})"
            self._tasks.start(self._disable(entry.record, identity, reason))

    async def _disable(self, record: Record, identity: str, reason: str) -> None:
        """Take a version out of service: its approved copy says why; the journal says so."""
        log.error("record %s.%s disabled: %s", self.settings.module, record.name, reason)
        kept = Approved(record, identity, reason, time.time())
        self.state.copies[record.name] = kept
        with contextlib.suppress(RegistryError):
            await self.store.keep_approved(kept)
        entry = JournalEntry(
            kind="middleware",
            point=record.stage,
            phase="record",
            who=f"{self.settings.module}.{record.name}",
            decision="disabled",
            cause=reason,
            identity=identity,
        )
        await publish_entry(self.bus.port, entry)
        self._dirty.set()
