"""Presence: each hookbus process says it is alive, and what it runs, in one KV bucket.

``hookbus up``, ``hookbus worker``, ``hookbus journal-sink`` and ``hookbus
agent`` put a :class:`PresenceMsg` under
``<user>.<instance>`` of ``hookbus_presence`` every ``heartbeat`` seconds and
delete it when they stop; the bucket forgets keys after ``MAX_AGE_S``, so a
killed process disappears by itself. ``hookbus status`` reads it (modules are
in the registry already). The key's first token is the process's NATS user
and the shipped permissions let each user write only its own keys, so a
reader trusts the key, not the value, for who it is. Presence never stops a
process: a bucket it cannot write is logged once and left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated, Final, Literal

import msgspec

from bus._client import Bus
from bus._core.clock import random_hex
from bus._core.errors import RegistryError
from bus._core.schema import Token, decode
from bus._core.subjects import PRESENCE_BUCKET, TOKEN_RE
from bus._runtime.tasks import stop_if_cancelled
from bus._transport.kv import Bucket

#: A short text of a presence record, as ``hookbus status`` shows it.
ShortText = Annotated[str, msgspec.Meta(max_length=200)]
#: What a process runs, as ``hookbus status`` groups it.
#: ``kernel``: a middleware kernel's own trust settings (a handler it manages, or ``*`` with ``trust-new``).
ComponentKind = Literal["bus", "agent", "worker", "trigger_engine", "journal_sink", "kernel"]


class PresenceComponent(msgspec.Struct, kw_only=True):
    """One part a process runs: its ``kind``, its ``name`` and a ``detail`` for people."""

    kind: ComponentKind
    name: ShortText
    detail: ShortText = ""


class PresenceMsg(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_presence`` bucket: one process says it is alive and what it runs."""

    user: Token  # the NATS user, also the key's first token (the permissions bind the two)
    instance: Token
    process: ShortText  # ``hookbus up``, ``hookbus worker`` ...
    version: ShortText  # the hookbus version it runs
    host: ShortText
    pid: Annotated[int, msgspec.Meta(ge=0)]
    heartbeat: Annotated[float, msgspec.Meta(gt=0, le=3600)]
    started: float
    at: float  # Unix time of this beat, by the process's clock
    components: Annotated[list[PresenceComponent], msgspec.Meta(max_length=32)]


log = logging.getLogger("hookbus.presence")

#: Seconds between beats; a record not renewed for LIVENESS_FACTOR beats is shown as silent.
DEFAULT_HEARTBEAT_S: Final = 5.0
LIVENESS_FACTOR: Final = 3
#: The bucket forgets a key this old: a process killed without deleting its key leaves within a minute.
MAX_AGE_S: Final = 60.0
#: The key's user token of a connection without a NATS user.
NO_USER: Final = "anon"


@cache
def hookbus_version() -> str:
    """The installed hookbus version."""
    try:
        return package_version("hookbus")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


async def open_presence(bus: Bus) -> Bucket:
    """Bind to the presence bucket, creating it on first use (``hookbus up`` does, as the bus role)."""
    return await bus.port.open_bucket(PRESENCE_BUCKET, ttl_s=MAX_AGE_S)


def component(kind: str, name: str, detail: str = "") -> PresenceComponent:
    """One part a process runs (``kind`` one of ComponentKind), texts cut to what the record takes."""
    return msgspec.convert({"kind": kind, "name": name[:200], "detail": detail[:200]}, PresenceComponent)


#: The most components a presence record holds (PresenceMsg.components).
MAX_COMPONENTS: Final = 32
#: The most kernel components a record carries .
MAX_KERNEL_COMPONENTS: Final = 16


def kernel_components(managed: frozenset[str], trust_new: bool) -> list[PresenceComponent]:
    """What a process's own middleware kernel trusts beyond the trust store, for the console and status.

    Managed handlers and ``trust-new`` are settings of one kernel, invisible to the others: said here, the
    console can show a handler as the kernel that runs it sees it.
    """
    parts = [component("kernel", "*", "trust-new")] if trust_new else []
    parts += [component("kernel", name, "managed") for name in sorted(managed)]
    return parts[:MAX_KERNEL_COMPONENTS]


@asynccontextmanager
async def presence(
    bus: Bus, process: str, components: list[PresenceComponent], heartbeat_s: float = DEFAULT_HEARTBEAT_S
) -> AsyncIterator[None]:
    """Keep this process's presence record while the block runs; delete it after.

    The Bus's own kernel settings (managed handlers, trust-new) are added as ``kernel`` components.
    """
    kernel = kernel_components(bus.middleware.managed, bus.middleware.trust_new)
    components = [*components[: MAX_COMPONENTS - len(kernel)], *kernel]
    user = bus.journal_origin or NO_USER
    if not TOKEN_RE.fullmatch(user):
        user = NO_USER
    started = time.time()
    instance = random_hex(12)
    key = f"{user}.{instance}"

    def record() -> bytes:
        return msgspec.json.encode(
            PresenceMsg(
                user=user,
                instance=instance,
                process=process[:200],
                version=hookbus_version(),
                host=socket.gethostname()[:200],
                pid=os.getpid(),
                heartbeat=heartbeat_s,
                started=started,
                at=time.time(),
                components=components,
            )
        )

    kv: Bucket | None = None
    try:
        kv = await open_presence(bus)
        await kv.put(key, record())
    except RegistryError as exc:
        log.warning("presence not announced (hookbus status will not list this process): %s", exc)
        kv = None
    beating = asyncio.create_task(_beat(kv, key, record, heartbeat_s)) if kv is not None else None
    try:
        yield
    finally:
        if beating is not None:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
        if kv is not None:
            with contextlib.suppress(RegistryError, TimeoutError):
                await asyncio.wait_for(kv.delete(key), 2.0)


async def _beat(kv: Bucket, key: str, record: Callable[[], bytes], heartbeat_s: float) -> None:
    failing = False
    while True:
        await asyncio.sleep(heartbeat_s)
        try:
            await kv.put(key, record())
            failing = False
        except RegistryError as exc:
            if not failing:
                log.warning("presence heartbeat failed (%s); retrying", exc)
            failing = True
        stop_if_cancelled()  # a cancel during the put's request can be swallowed (Python 3.11)


@dataclass(frozen=True, slots=True)
class Present:
    """A process as its presence record says, with how long ago it last beat (by the reader's clock)."""

    key: str
    record: PresenceMsg
    age_s: float

    @property
    def silent(self) -> bool:
        """Not renewed for LIVENESS_FACTOR beats: probably gone without deleting its key."""
        return self.age_s > LIVENESS_FACTOR * self.record.heartbeat


async def read_presence(bus: Bus, within_s: float = 10.0) -> tuple[list[Present], list[str]]:
    """Every presence record on the bus, and one problem line per record that is not one."""
    kv = await open_presence(bus)
    found: list[Present] = []
    problems: list[str] = []
    now = time.time()
    for key, value in (await kv.stored(within_s)).items():
        _take(key, value, now, found, problems)
    return found, problems


def _take(key: str, value: bytes, now: float, found: list[Present], problems: list[str]) -> None:
    try:
        record = decode(value, PresenceMsg, f"presence record {key!r}", ValueError)
    except ValueError as exc:
        problems.append(str(exc)[:300])
        return
    if key != f"{record.user}.{record.instance}":
        problems.append(f"presence record {key!r} claims to be {record.user}.{record.instance}: ignored")
        return
    found.append(Present(key, record, max(0.0, now - record.at)))
