"""The handler registry and trust store on JetStream KV: the handshake of the middleware.

Three buckets:

- ``hookbus_modules``: one key per serving process, ``<module>.<instance>``,
  whose value is the module's announcement (its declarations, its request
  subject, its heartbeat). A protocol 2 module puts it once, again when its
  connection comes back, and before the bucket's max age (``refresh``), and
  deletes it when it stops: an idle fleet costs the kernels no registry
  traffic. A kernel learns a killed one's absence from the first call that
  meets NATS's no-responders (bus/_middleware/kernel/view.py, ``absent``). A
  protocol 1 module (an explicit ``heartbeat``) re-puts it every heartbeat; the
  kernel drops an instance it has not heard from for ``LIVENESS_FACTOR``
  heartbeats (refreshes, for protocol 2) once the bucket confirms no newer one.
- ``hookbus_trust``: one key per handler, ``<module>.<handler>``, holding the
  approved identity (see :mod:`bus._middleware.trust`).
- ``hookbus_guards``: the fail-closed handlers modules recorded (see :mod:`bus._middleware.guards`).

The kernel watches them and keeps a local view; ``Bus.intercept`` reads only
that view, so an undeclared stage costs a dict lookup.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

import msgspec

from bus._core.clock import random_hex
from bus._core.declaration import Declaration, from_wire
from bus._core.errors import ForeignAnnouncement, MiddlewareError, RegistryError, TooManyHandlers
from bus._core.middleware_schema import AnnouncementMsg
from bus._core.schema import decode
from bus._core.subjects import GUARDS_BUCKET, RECORDS_APPROVED_BUCKET, RECORDS_BUCKET, module_subject
from bus._core.subjects import MODULES_BUCKET as MODULES_BUCKET
from bus._core.subjects import TRUST_BUCKET as TRUST_BUCKET
from bus._transport.kv import Bucket, KvEntry, KvWatch
from bus._transport.port import Port

log = logging.getLogger("hookbus.registry")

PROTOCOL: Final = 2
#: The protocol of a module that beats (an explicit ``heartbeat``): every kernel still serves it.
PROTOCOL_BEATING: Final = 1
#: An instance unheard of for this many heartbeats (or refreshes) is taken as dead.
LIVENESS_FACTOR: Final = 3
#: The modules bucket forgets keys this old (long-dead instances that never deleted themselves). Buckets an
#: older hookbus made forget them after 300 s: a module re-puts within a third of what its bucket says.
MODULES_MAX_AGE: Final = 3600.0
#: A protocol 2 module re-puts its unchanged announcement every max age / this (so a late put is no gap).
REFRESHES_PER_MAX_AGE: Final = 3
#: Handlers one announcement may declare, and one module over all its live instances (docs/protocol.md):
#: an announcement over it is refused whole, so no module makes every kernel's view rebuild unbounded.
MAX_HANDLERS: Final = 256


def check_handler_count(module: str, count: int) -> None:
    """What a module checks before it announces: over MAX_HANDLERS, every kernel would refuse it whole."""
    if count > MAX_HANDLERS:
        raise MiddlewareError(f"module {module} declares {count} handlers, over the cap of {MAX_HANDLERS}")


async def open_bucket(port: Port, bucket: str) -> Bucket:
    """Bind to a middleware bucket, creating it on first use; RegistryError when JetStream is off."""
    return await port.open_bucket(bucket, ttl_s=MODULES_MAX_AGE if bucket == MODULES_BUCKET else None)


async def ensure_buckets(port: Port, *more: tuple[str, float | None]) -> None:
    """Create the middleware buckets (handler records' too, and ``more``: name and max age) and the claim
    check's store if missing, or bring ones an older hookbus made to refusing rollups and purges
    (``hookbus up``, as bus)."""
    for bucket in (MODULES_BUCKET, TRUST_BUCKET, GUARDS_BUCKET, RECORDS_BUCKET, RECORDS_APPROVED_BUCKET):
        await port.ensure_bucket(bucket, ttl_s=MODULES_MAX_AGE if bucket == MODULES_BUCKET else None)
    for bucket, ttl_s in more:
        await port.ensure_bucket(bucket, ttl_s)
    await port.ensure_payloads_bucket()


@dataclass(frozen=True, slots=True)
class Announcement:
    """One serving process of a module, as it announced itself."""

    module: str
    instance: str
    subject: str
    heartbeat: float
    batch: bool
    declarations: tuple[Declaration, ...]
    #: Protocol 2: seconds between re-puts of the unchanged announcement; 0: protocol 1, a beat every heartbeat.
    refresh: float = field(default=0.0, compare=False)
    #: Unix time of the announcement by the module's clock (compare=False: a heartbeat is no change).
    at: float = field(default=0.0, compare=False)
    #: Each declaration's identity, in order, and their digest: computed once, when the announcement is made.
    identities: tuple[str, ...] = field(default=(), compare=False, repr=False)
    version: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.identities) != len(self.declarations):
            object.__setattr__(self, "identities", tuple(decl.identity() for decl in self.declarations))
        if not self.version:
            object.__setattr__(self, "version", _digest(self.identities))

    @property
    def key(self) -> str:
        return f"{self.module}.{self.instance}"

    @property
    def interval(self) -> float:
        """Seconds between this instance's puts while it lives: its refresh (protocol 2) or its heartbeat."""
        return self.refresh or self.heartbeat

    def to_bytes(self) -> bytes:
        return msgspec.json.encode(
            AnnouncementMsg(
                protocol=PROTOCOL if self.refresh else PROTOCOL_BEATING,
                module=self.module,
                instance=self.instance,
                subject=self.subject,
                heartbeat=self.heartbeat,
                batch=self.batch,
                handlers=[decl.to_wire() for decl in self.declarations],
                host=socket.gethostname(),
                pid=os.getpid(),
                refresh=self.refresh or msgspec.UNSET,
                at=time.time(),
            )
        )


#: Announcements already checked, by entry key and their bytes before the trailing ``"at"``: a heartbeat
#: puts the same announcement again with a new time, so a kernel checks it once, not once a heartbeat
#: (every kernel gets every module's heartbeats: bench/bench_scale.py, registry). Bounded: cleared when full.
_CHECKED: dict[tuple[str | None, bytes], Announcement] = {}
_CHECKED_MAX: Final = 4096
_AT: Final = b',"at":'
#: What may follow ``,"at":`` for the fast path: a plain JSON number closing the object, nothing else.
_AT_TAIL: Final = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\}")


def parse_announcement(data: bytes, key: str | None = None) -> Announcement:
    """Decode an announcement; raises ValueError/KeyError/TypeError (and hookbus errors) if malformed.

    Bytes equal to an announcement already checked under the same key up to a
    new trailing ``"at"`` number (a heartbeat) take the checked one with the new
    time; anything else is checked in full.

    A module's identity is its name, bound to its credentials by the key it may
    write (``<module>.<instance>``; the shipped permissions let each module user
    put only its own keys): the ``module`` field must agree with ``key``, and the
    request subject is derived from the name, never taken from the entry.
    Raises ForeignAnnouncement when they disagree.
    """
    cut = data.rfind(_AT)
    head = data[:cut] if cut > 0 else None
    if head is not None:
        checked = _CHECKED.get((key, head))
        tail = data[cut + len(_AT) :]
        if checked is not None and _AT_TAIL.fullmatch(tail):
            at = float(tail[:-1])
            if math.isfinite(at):
                return replace(checked, at=at)
    ann = _checked_announcement(data, key)
    if head is not None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key, head] = ann
    return ann


def _checked_announcement(data: bytes, key: str | None) -> Announcement:
    msg = decode(data, AnnouncementMsg, "announcement", ValueError)
    if len(msg.handlers) > MAX_HANDLERS:
        raise TooManyHandlers(f"it declares {len(msg.handlers)} handlers, over the cap of {MAX_HANDLERS}")
    module = msg.module
    subject = module_subject(module)  # SubjectError for a name that is no token
    if key is not None and key != f"{module}.{msg.instance}":
        raise ForeignAnnouncement(f"entry {key!r} announces module {module!r} (instance {msg.instance!r})")
    if msg.subject is not msgspec.UNSET and msg.subject != subject:
        raise ForeignAnnouncement(f"module {module!r} announces subject {msg.subject!r}, not its own {subject!r}")
    decls = tuple(from_wire(item) for item in msg.handlers)
    if any(decl.module != module for decl in decls):
        raise ForeignAnnouncement("a handler names another module")
    if not math.isfinite(msg.at):
        raise ValueError("'at' is not a finite time")
    return Announcement(
        module=module,
        instance=msg.instance,
        subject=subject,
        heartbeat=msg.heartbeat,
        batch=msg.batch is True,
        declarations=decls,
        refresh=msg.refresh if msg.protocol >= PROTOCOL and msg.refresh is not msgspec.UNSET else 0.0,
        at=msg.at,
    )


def check_module_cap(instances: Mapping[str, tuple[Announcement, float]], key: str, ann: Announcement) -> None:
    """Refuse ``ann`` (TooManyHandlers) if its module's live ``instances`` would declare more than MAX_HANDLERS
    handlers, or more than two versions' worth of them (old and new side by side in a rolling deploy)."""
    versions = set(zip((decl.qualname for decl in ann.declarations), ann.identities, strict=True))
    for other, (known, _) in instances.items():
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


def version_of(declarations: Iterable[Declaration]) -> str:
    """A digest of a module's declared identities: instances with equal versions declare the same handlers."""
    return _digest(decl.identity() for decl in declarations)


def _digest(identities: Iterable[str]) -> str:
    return hashlib.sha256(",".join(sorted(identities)).encode()).hexdigest()[:16]


def request_subject(ann: Announcement) -> str:
    """Where requests for this instance's handlers go: ``<subject>.<version>``.

    The kernel derives the version from the declarations itself, so a request
    reaches only instances that declare exactly these identities (old and new
    versions side by side in a rolling deploy are never mixed up).
    """
    return f"{ann.subject}.{ann.version}"


class Announced(Protocol):
    """What an announcement is made of: a module's name, heartbeat (None: protocol 2) and declarations."""

    @property
    def name(self) -> str: ...

    @property
    def heartbeat(self) -> float | None: ...

    @property
    def declarations(self) -> list[Declaration]: ...


def refresh_for(max_age_s: float | None) -> float:
    """How often a protocol 2 module re-puts its announcement in a bucket whose keys live ``max_age_s``."""
    age = MODULES_MAX_AGE if not max_age_s or max_age_s <= 0 else min(max_age_s, MODULES_MAX_AGE)
    return max(1.0, age / REFRESHES_PER_MAX_AGE)


def announcement_of(module: Announced, max_age_s: float | None = MODULES_MAX_AGE) -> Announcement:
    """The announcement of a new serving process: protocol 2 (re-put every ``refresh_for(max_age_s)``) unless
    the module beats (an explicit ``heartbeat``: protocol 1)."""
    beat = module.heartbeat
    return Announcement(
        module=module.name,
        instance=random_hex(12),
        subject=module_subject(module.name),
        heartbeat=1.0 if beat is None else beat,
        batch=True,
        declarations=tuple(module.declarations),
        refresh=refresh_for(max_age_s) if beat is None else 0.0,
    )


#: How often, and for how long each time, a watch may fail to deliver a bucket's initial values.
LOAD_ATTEMPTS: Final = 3
LOAD_WITHIN_S: Final = 10.0


class Watch:
    """Follows one bucket: calls ``on_change(key, value or None, revision)`` for each put or delete.

    A key gone without its writer's delete marker (purged, or not delivered
    again after a restart) comes with revision 0.

    :meth:`restart` opens a new watch (after a stall the kernel noticed) and
    reports as deleted the keys the new one no longer delivers; what the old
    one delivered stays known meanwhile.
    """

    def __init__(self, kv: Bucket, on_change: Callable[[str, bytes | None, int], None]) -> None:
        self._kv = kv
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self.keys: set[str] = set()
        self.loaded = asyncio.Event()

    async def start(self, attempts: int = LOAD_ATTEMPTS, within_s: float = LOAD_WITHIN_S) -> None:
        """Open the watch and wait until what the bucket held is delivered.

        Bounded: a watch that stalls or dies before its initial values are in
        (a consumer lost under load) is opened again, ``attempts`` times, then
        RegistryError; a kernel never hangs on its registry.
        """
        problem = "nothing"
        for _ in range(attempts):
            watcher = await self._kv.watch()
            task = self._task = asyncio.get_running_loop().create_task(self._follow(watcher, None))
            loaded = asyncio.ensure_future(self.loaded.wait())
            await asyncio.wait({task, loaded}, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
            if loaded.done():
                return
            loaded.cancel()
            problem = repr(task.exception()) if task.done() and not task.cancelled() else "nothing"
            await self.stop()
            log.warning("the watch of %s delivered %s within %gs; opening it again", self._kv.name, problem, within_s)
        raise RegistryError(f"the watch of bucket {self._kv.name} did not load ({problem} after {attempts} tries)")

    async def restart(self) -> bool:
        """Replace the watch; False (the old one kept) if the server does not answer now."""
        try:
            watcher = await self._kv.watch()
        except RegistryError as exc:
            log.info("registry watch could not restart (%r); keeping what is known", exc)
            return False
        await self.stop()
        self._task = asyncio.get_running_loop().create_task(self._follow(watcher, set()))
        return True

    async def _follow(self, watcher: KvWatch, fresh: set[str] | None) -> None:
        entry: KvEntry | None
        try:
            async for entry in watcher:
                if entry is None:  # the end of what was stored when the watch began
                    self._loaded(fresh)
                    fresh = None
                    continue
                deleted = entry.value is None
                if deleted:
                    self.keys.discard(entry.key)
                else:
                    self.keys.add(entry.key)
                    if fresh is not None:
                        fresh.add(entry.key)
                self._on_change(entry.key, entry.value, 0 if entry.purged else entry.revision)
        finally:
            await watcher.stop()

    def _loaded(self, fresh: set[str] | None) -> None:
        """The initial values are in: after a restart, keys not delivered again were deleted meanwhile."""
        if fresh is not None:
            for key in self.keys - fresh:
                self.keys.discard(key)
                self._on_change(key, None, 0)
        self.loaded.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
