"""JetStream key-value buckets behind hookbus types: the only code that touches nats-py's KV API.

:class:`Bucket` reads, writes and watches one bucket; its entries are
:class:`KvEntry` (a deleted or purged key has ``value`` None) and every NATS or
JetStream failure surfaces as :class:`~bus._core.errors.RegistryError`, so the
middleware above names no nats-py type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js import api

from bus._core.errors import RegistryError
from bus._core.subjects import kv_key_subject, kv_stream
from bus._transport.bucket_stream import add_bucket_stream
from bus._transport.connection import jetstream_replicas
from bus._transport.home import home_of
from bus._transport.kv_mirror import origin_prefix, write_prefix

log = logging.getLogger("hookbus.registry")

#: JetStream's error code for a write whose expected last subject sequence did not match.
_WRONG_LAST_SEQUENCE = 10071

#: What a bucket operation may raise from nats-py (and asyncio, for a timed-out request).
_FAILURES = (nats_errors.Error, js_errors.Error, TimeoutError)


@dataclass(frozen=True, slots=True)
class KvEntry:
    """One key as a bucket delivered it: ``value`` None when the key was deleted or purged (or is empty)."""

    key: str
    value: bytes | None
    revision: int
    #: Erased by a purge (no delete marker of its writer's): what a kernel holding a guard ignores.
    purged: bool = False


def _entry(raw: Any) -> KvEntry:
    deleted = raw.operation in ("DEL", "PURGE") or not raw.value
    return KvEntry(raw.key, None if deleted else raw.value, raw.revision or 0, raw.operation == "PURGE")


def _failed(bucket: str, what: str, exc: BaseException) -> RegistryError:
    return RegistryError(f"bucket {bucket}: {what} failed ({exc!r})")


@contextlib.contextmanager
def _failing(bucket: str, what: str) -> Iterator[None]:
    """A transport failure inside, raised as the RegistryError that names ``bucket`` and ``what`` was done."""
    try:
        yield
    except _FAILURES as exc:
        raise _failed(bucket, what, exc) from None


class KvWatch:
    """A running watch of a whole bucket: yields KvEntry, and None once the stored keys are all delivered.

    "All delivered" is checked against the keys the bucket held just before the
    watch began, not taken from the server's pending count alone: that count
    says 0 too early when keys are rewritten while the watch starts (a module
    beating its heartbeat), and a kernel that believed it would start without
    that module. After the server's end marker, a key still missing is looked
    up: gone meanwhile, it is not waited for; present, the watch waits for it.
    """

    def __init__(self, bucket: str, watcher: Any, present: set[str] | None = None, lookup: Any = None) -> None:
        self._bucket = bucket
        self._watcher = watcher
        self._wanted = set(present or ())
        self._lookup = lookup  # async key -> bool (still present), for keys the server's count skipped

    def __aiter__(self) -> AsyncIterator[KvEntry | None]:
        return self._follow()

    async def _follow(self) -> AsyncIterator[KvEntry | None]:
        server_done = loaded = False
        try:
            async for raw in self._watcher:
                if raw is None:
                    server_done = True
                else:
                    self._wanted.discard(raw.key)
                    yield _entry(raw)
                if server_done and not loaded and await self._all_delivered():
                    loaded = True
                    yield None
        except _FAILURES as exc:
            raise _failed(self._bucket, "watch", exc) from None

    async def _all_delivered(self) -> bool:
        if self._wanted and self._lookup is not None:  # once, at the server's end marker
            lookup, self._lookup = self._lookup, None
            for key in list(self._wanted):
                if not await lookup(key):
                    self._wanted.discard(key)  # deleted or expired since: nothing to wait for
        return not self._wanted

    async def stop(self) -> None:
        """End the watch (quietly if the connection is already gone)."""
        with contextlib.suppress(*_FAILURES, AttributeError):
            await self._watcher.stop()


class Bucket:
    """One JetStream KV bucket: get, put, create, delete, watch."""

    def __init__(self, name: str, kv: Any, js: Any = None, write: str | None = None) -> None:
        self.name = name
        self._kv = kv
        self._js = js
        #: A local mirror's writes go to its origin under this prefix (kv_mirror.write_prefix); None: nats-py's.
        self._origin = write

    @property
    def cross_domain(self) -> bool:
        """True when writes go to another JetStream domain: a local mirror of the hub's bucket, or the hub's own."""
        return self._origin is not None

    async def _publish(self, key: str, value: bytes, headers: dict[str, str] | None = None) -> int:
        """A write to a mirror's origin: what nats-py's put does, on the origin's subject."""
        return int((await self._js.publish(f"{self._origin}{key}", value, headers=headers)).seq)

    async def get(self, key: str) -> KvEntry | None:
        """The key's current entry, None if it does not exist or was deleted."""
        with _failing(self.name, f"get {key}"), contextlib.suppress(js_errors.KeyNotFoundError):
            return _entry(await self._kv.get(key))
        return None

    async def put(self, key: str, value: bytes) -> int:
        """Store ``value`` under ``key``; returns the new revision."""
        with _failing(self.name, f"put {key}"):
            if self._origin is not None:
                return await self._publish(key, value)
            return int(await self._kv.put(key, value))

    async def create(self, key: str, value: bytes) -> bool:
        """Store ``value`` only if ``key`` holds nothing; False if it already does."""
        try:
            if self._origin is not None:
                return await self._create_at_origin(key, value)
            await self._kv.create(key, value)
        except js_errors.KeyWrongLastSequenceError:
            return False
        except _FAILURES as exc:
            raise _failed(self.name, f"create {key}", exc) from None
        return True

    async def _create_at_origin(self, key: str, value: bytes) -> bool:
        """nats-py's create on the origin: only over nothing, or over the key's delete marker."""
        if await self._write_after(key, value, 0):
            return True
        try:
            await self._kv._get(key)  # as nats-py's create does: its public get hides a delete marker's revision
            return False  # a live value: taken
        except js_errors.KeyDeletedError as deleted:
            return await self._write_after(key, value, deleted.entry.revision or 0)
        except js_errors.KeyNotFoundError:
            return False

    async def _write_after(self, key: str, value: bytes, last: int) -> bool:
        try:
            await self._publish(key, value, {"Nats-Expected-Last-Subject-Sequence": str(last)})
        except js_errors.APIError as exc:
            if exc.err_code == _WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def delete(self, key: str) -> None:
        with _failing(self.name, f"delete {key}"):
            if self._origin is not None:
                await self._publish(key, b"", {"KV-Operation": "DEL"})
            else:
                await self._kv.delete(key)

    async def max_age(self) -> float | None:
        """Seconds the bucket keeps a key (its stream's max age); None for no limit or when it cannot be read."""
        if self._js is None:
            return None
        try:
            info = await self._js.stream_info(kv_stream(self.name))
        except _FAILURES:
            return None
        age = info.config.max_age
        return float(age) if age else None

    async def watch(self) -> KvWatch:
        """Watch every key: the stored ones first (then None), then each change."""
        try:
            present = await self._keys_present()
            return KvWatch(self.name, await self._kv.watchall(), present, self._present)
        except _FAILURES as exc:
            raise _failed(self.name, "watch", exc) from None

    async def stored(self, within_s: float) -> dict[str, bytes]:
        """Every stored key's value, in the order a watch delivers them; RegistryError if not read in ``within_s``."""
        found: dict[str, bytes] = {}
        watch = await self.watch()
        try:
            async with asyncio.timeout(within_s):
                async for entry in watch:
                    if entry is None:
                        break
                    if entry.value is not None:
                        found[entry.key] = entry.value
        except TimeoutError:
            raise RegistryError(f"the {self.name} bucket did not load within {within_s:g}s") from None
        finally:
            await watch.stop()
        return found

    async def _keys_present(self) -> set[str]:
        """The keys the bucket's stream holds a message for (deleted keys included: their marker)."""
        if self._js is None:
            return set()
        info = await self._js.stream_info(kv_stream(self.name), subjects_filter=">")
        prefix = kv_key_subject(self.name)
        return {subject[len(prefix) :] for subject in (info.state.subjects or {}) if subject.startswith(prefix)}

    async def _present(self, key: str) -> bool:
        """True if ``key`` holds a value (the watch will deliver it)."""
        return await self.get(key) is not None  # None: deleted since (a delete marker reads as absent too)


def bucket_config(name: str, ttl_s: float | None, replicas: int) -> api.StreamConfig:
    """A bucket's stream as hookbus makes it: nats-py's KV layout (one value per key, deletes by marker),
    but neither rollup headers nor purges, so a put on one's own key never erases another's."""
    window = 120.0 if not ttl_s else min(120.0, ttl_s)
    return kept_stream(
        name=kv_stream(name),
        subjects=[kv_key_subject(name) + ">"],
        max_age=ttl_s,
        max_msgs_per_subject=1,
        max_msgs=-1,
        max_bytes=-1,
        max_msg_size=-1,
        max_consumers=-1,
        duplicate_window=window,
        num_replicas=replicas,
        allow_msg_ttl=True,
    )


def kept_stream(**fields: Any) -> api.StreamConfig:
    """A file stream that keeps what it holds: a full one refuses new messages; no rollup, no delete, no purge."""
    return api.StreamConfig(
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        discard=api.DiscardPolicy.NEW,
        allow_rollup_hdrs=False,
        deny_delete=True,
        deny_purge=True,
        **fields,
    )


def hardened(config: Any) -> bool:
    """Whether a bucket's stream refuses rollups and purges (older hookbus versions made it with both)."""
    return not config.allow_rollup_hdrs and bool(config.deny_purge)


async def bind_bucket(nc: Any, name: str, ttl_s: float | None = None) -> Bucket:
    """Bind to a bucket, creating it on first use (keys expire after ``ttl_s``); RegistryError when JetStream is off."""
    js = nc.jetstream()
    try:
        return await _bound(js, name)
    except js_errors.BucketNotFoundError:
        pass
    except (js_errors.ServiceUnavailableError, nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
        raise RegistryError(
            f"JetStream is not available on this server ({type(exc).__name__}); run nats-server with -js"
        ) from None
    home = await home_of(nc)
    if home.domain is not None:
        return await _bound_at(nc, home.domain, name)
    await add_bucket_stream(js, name, bucket_config(name, ttl_s, jetstream_replicas(nc)))
    with _failing(name, "bind"):
        return await _bound(js, name)


async def _bound_at(nc: Any, domain: str, name: str) -> Bucket:
    """Bucket ``name`` of another JetStream domain (the hub's), read and written across the leaf link."""
    js = nc.jetstream(domain=domain)
    try:
        return Bucket(name, await js.key_value(name), js, origin_prefix(domain, name))
    except js_errors.BucketNotFoundError:
        raise RegistryError(
            f"the {name} bucket does not exist in domain {domain!r}: start 'hookbus up' there"
        ) from None
    except _FAILURES as exc:
        raise _failed(name, f"bind in domain {domain}", exc) from None


async def _bound(js: Any, name: str) -> Bucket:
    """The bucket ``name`` as this server's JetStream holds it: a bucket of its own, or a local mirror."""
    kv = await js.key_value(name)
    return Bucket(name, kv, js, write_prefix((await js.stream_info(kv_stream(name))).config))


async def ensure_bucket(nc: Any, name: str, ttl_s: float | None = None) -> Bucket:
    """What ``hookbus up`` does (as the bus role): open the bucket, and bring one an older hookbus made
    (rollup headers allowed, purges not denied) to :func:`bucket_config`'s; RegistryError if refused."""
    bucket = await bind_bucket(nc, name, ttl_s)
    if bucket.cross_domain:
        return bucket  # the origin's config is the hub's to keep
    js = nc.jetstream()
    try:
        info = await js.stream_info(kv_stream(name))
        if hardened(info.config):
            return bucket
        config = info.config
        config.allow_rollup_hdrs = False
        config.deny_purge = True
        config.deny_delete = True
        await js.update_stream(config)
    except _FAILURES as exc:
        raise RegistryError(
            f"the {name} bucket was made by an older hookbus and lets any writer erase it (rollup headers, "
            f"purges), and this user may not update it ({type(exc).__name__}): run 'hookbus up' once as the "
            f"operator, or 'nats stream edit {kv_stream(name)} --no-allow-rollup --deny-purge'"
        ) from None
    log.warning("bucket %s was made by an older hookbus: rollups and purges are now refused", name)
    return bucket
