"""The kernel's live view of the middleware: who serves what, trusted or not, in which order.

Built from watches on the registry and trust buckets (:mod:`bus.registry`),
rebuilt when a declaration, an approval or a module's liveness changes, and
swapped in whole, so ``Bus.intercept`` reads ``chains[stage]`` without locks
or network. Stages nobody declared are absent from ``chains``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.kv import KeyValue

from bus.chain import BrokenChain, order
from bus.declaration import Declaration
from bus.errors import HookbusError
from bus.registry import (
    LIVENESS_FACTOR,
    MODULES_BUCKET,
    MODULES_MAX_AGE,
    TRUST_BUCKET,
    Announcement,
    Watch,
    open_bucket,
    parse_announcement,
)
from bus.trust import Managed, TrustState, approved_identity, record, state_of, trust_key

log = logging.getLogger("hookbus.middleware")

#: Longest pause between liveness checks (shorter when a module beats faster).
SWEEP_EVERY: Final = 0.5

#: Called with (stage, reason) when a chain breaks and (stage, None) when it works again.
BrokenCallback = Callable[[str, str | None], None]


@dataclass(frozen=True, slots=True)
class Link:
    """One handler in a stage's chain, with what the kernel needs to call it."""

    decl: Declaration
    subject: str
    batch: bool
    trust: TrustState
    match: frozenset[str] | None  # canonical names the handler wants; None: every call
    identity: str  # the declaration's hash (trust, journal)


@dataclass(frozen=True, slots=True)
class StageChain:
    stage: str
    links: tuple[Link, ...]
    broken: str | None = None


class View:
    """Watches the registry and the trust store; keeps ``chains`` current."""

    def __init__(
        self,
        nc: Client,
        *,
        managed: Managed,
        trust_new: bool,
        aliases: Mapping[str, str],
        on_broken: BrokenCallback | None = None,
    ) -> None:
        self._nc = nc
        self.managed = managed
        self.trust_new = trust_new
        self.aliases = dict(aliases)
        self._on_broken = on_broken
        self.chains: dict[str, StageChain] = {}
        self.instances: dict[str, tuple[Announcement, float]] = {}
        self.approved: dict[str, str] = {}
        self._broken: dict[str, str] = {}
        self._watches: list[Watch] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._trust_kv: KeyValue | None = None
        self._started = False
        self._changed = asyncio.Event()

    async def start(self) -> None:
        self._trust_kv = await open_bucket(self._nc, TRUST_BUCKET)
        modules_kv = await open_bucket(self._nc, MODULES_BUCKET)
        self._watches = [Watch(self._trust_kv, self._on_trust), Watch(modules_kv, self._on_module)]
        for watch in self._watches:
            await watch.start()
        self._started = True
        self._drop_dead()
        self._rebuild()
        self._spawn(self._sweep())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for watch in self._watches:
            await watch.stop()

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_module(self, key: str, data: bytes | None) -> None:
        known = self.instances.get(key)
        if data is None:
            if self.instances.pop(key, None) is not None:
                self._rebuild()
            return
        try:
            ann = parse_announcement(data)
        except (ValueError, KeyError, TypeError, HookbusError) as exc:
            log.warning("registry entry %s is malformed (%s): ignored", key, exc)
            return
        self.instances[key] = (ann, self._seen(ann))
        if known is None or known[0] != ann:
            self._rebuild()

    def _seen(self, ann: Announcement) -> float:
        """When the instance was last heard of: now, or for what was stored before the watch began,
        back-dated by the announcement's age, so long-dead instances are not called at start-up."""
        now = time.monotonic()
        if self._started or not ann.at:
            return now
        return now - min(max(0.0, time.time() - ann.at), MODULES_MAX_AGE)

    def _on_trust(self, key: str, data: bytes | None) -> None:
        identity = approved_identity(data)
        if identity is None:
            self.approved.pop(key, None)
        else:
            self.approved[key] = identity
        self._rebuild()

    async def _sweep(self) -> None:
        """Drop instances that stopped beating; a killed module leaves the chain within a bound.

        Silence heard while this kernel itself was cut off from NATS says nothing
        about the modules: after our own disconnect every instance gets a fresh
        liveness window instead of being dropped (a fail-closed guard must keep
        guarding across a server restart).
        """
        reconnects = self._nc.stats["reconnects"]
        while True:
            beats = [ann.heartbeat for ann, _ in self.instances.values()]
            await asyncio.sleep(min([SWEEP_EVERY, *beats]))
            if not self._nc.is_connected or self._nc.stats["reconnects"] != reconnects:
                reconnects = self._nc.stats["reconnects"]
                self._refresh_seen()
                continue
            if self._drop_dead():
                self._rebuild()

    def _refresh_seen(self) -> None:
        now = time.monotonic()
        self.instances = {key: (ann, now) for key, (ann, _) in self.instances.items()}

    def _drop_dead(self) -> bool:
        now = time.monotonic()
        dead = [key for key, (ann, seen) in self.instances.items() if now - seen > LIVENESS_FACTOR * ann.heartbeat]
        for key in dead:
            log.info("module instance %s stopped beating: no longer called", key)
            del self.instances[key]
        return bool(dead)

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
        by_stage: dict[str, list[tuple[Declaration, Announcement]]] = {}
        for decl, ann in self.declarations().values():
            by_stage.setdefault(decl.stage, []).append((decl, ann))
        chains = {stage: self._chain(stage, entries) for stage, entries in by_stage.items()}
        self.chains = chains
        self._report_broken(chains)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait (up to ``timeout``) until ``predicate()`` holds, checking after each rebuild."""
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._changed.wait()

    def _chain(self, stage: str, entries: list[tuple[Declaration, Announcement]]) -> StageChain:
        anns = {decl.qualname: ann for decl, ann in entries}
        try:
            ordered = order(stage, [decl for decl, _ in entries])
        except BrokenChain as exc:
            return StageChain(stage, (), exc.reason)
        links = []
        for decl in ordered:
            trust = self.trust_of(decl)
            if trust is TrustState.UNTRUSTED and self.trust_new:
                self._spawn(self._approve_new(decl))
            match = frozenset(self.aliases.get(name, name) for name in decl.match) if decl.match else None
            ann = anns[decl.qualname]
            links.append(Link(decl, ann.subject, ann.batch, trust, match, decl.identity()))
        return StageChain(stage, tuple(links))

    def _report_broken(self, chains: dict[str, StageChain]) -> None:
        now_broken = {stage: chain.broken for stage, chain in chains.items() if chain.broken}
        for stage, reason in now_broken.items():
            if self._broken.get(stage) != reason:
                log.error("middleware chain of %s disabled: %s; its handlers are not called", stage, reason)
                if self._on_broken is not None:
                    self._on_broken(stage, reason)
        for stage in self._broken.keys() - now_broken.keys():
            log.warning("middleware chain of %s works again", stage)
            if self._on_broken is not None:
                self._on_broken(stage, None)
        self._broken = now_broken

    async def approve(self, decl: Declaration, how: str = "approved") -> None:
        """Write ``decl``'s current identity to the trust store (what ``hookbus approve`` does)."""
        assert self._trust_kv is not None
        await self._trust_kv.put(trust_key(decl), record(decl, how))

    async def _approve_new(self, decl: Declaration) -> None:
        """trust_new: approve a never-seen handler (create fails if someone approved meanwhile)."""
        assert self._trust_kv is not None
        with contextlib.suppress(nats.js.errors.KeyWrongLastSequenceError, nats.errors.Error):
            await self._trust_kv.create(trust_key(decl), record(decl, "trust-new"))
            log.warning("trust_new: approved new handler %s on first sight", decl.qualname)
