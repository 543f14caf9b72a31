"""JetStream key-value buckets behind hookbus types: the only code that touches nats-py's KV API.

:class:`Bucket` reads, writes and watches one bucket; its entries are
:class:`KvEntry` (a deleted or purged key has ``value`` None) and every NATS or
JetStream failure surfaces as :class:`~bus.core.errors.RegistryError`, so the
middleware above names no nats-py type.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors

from bus.core.errors import RegistryError
from bus.core.subjects import kv_key_subject, kv_stream
from bus.transport.connection import jetstream_replicas

#: What a bucket operation may raise from nats-py (and asyncio, for a timed-out request).
_FAILURES = (nats_errors.Error, js_errors.Error, TimeoutError)


@dataclass(frozen=True, slots=True)
class KvEntry:
    """One key as a bucket delivered it: ``value`` None when the key was deleted or purged (or is empty)."""

    key: str
    value: bytes | None
    revision: int


def _entry(raw: Any) -> KvEntry:
    deleted = raw.operation in ("DEL", "PURGE") or not raw.value
    return KvEntry(raw.key, None if deleted else raw.value, raw.revision or 0)


def _failed(bucket: str, what: str, exc: BaseException) -> RegistryError:
    return RegistryError(f"bucket {bucket}: {what} failed ({exc!r})")


class Watch:
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

    def __init__(self, name: str, kv: Any, js: Any = None) -> None:
        self.name = name
        self._kv = kv
        self._js = js

    async def get(self, key: str) -> KvEntry | None:
        """The key's current entry, None if it does not exist or was deleted."""
        try:
            return _entry(await self._kv.get(key))
        except js_errors.KeyNotFoundError:
            return None
        except _FAILURES as exc:
            raise _failed(self.name, f"get {key}", exc) from None

    async def put(self, key: str, value: bytes) -> int:
        """Store ``value`` under ``key``; returns the new revision."""
        try:
            return int(await self._kv.put(key, value))
        except _FAILURES as exc:
            raise _failed(self.name, f"put {key}", exc) from None

    async def create(self, key: str, value: bytes) -> bool:
        """Store ``value`` only if ``key`` holds nothing; False if it already does."""
        try:
            await self._kv.create(key, value)
        except js_errors.KeyWrongLastSequenceError:
            return False
        except _FAILURES as exc:
            raise _failed(self.name, f"create {key}", exc) from None
        return True

    async def delete(self, key: str) -> None:
        try:
            await self._kv.delete(key)
        except _FAILURES as exc:
            raise _failed(self.name, f"delete {key}", exc) from None

    async def watch(self) -> Watch:
        """Watch every key: the stored ones first (then None), then each change."""
        try:
            present = await self._keys_present()
            return Watch(self.name, await self._kv.watchall(), present, self._present)
        except _FAILURES as exc:
            raise _failed(self.name, "watch", exc) from None

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


async def open_bucket(nc: Any, name: str, ttl_s: float | None = None) -> Bucket:
    """Bind to a bucket, creating it on first use (keys expire after ``ttl_s``); RegistryError when JetStream is off."""
    js = nc.jetstream()
    try:
        return Bucket(name, await js.key_value(name), js)
    except js_errors.BucketNotFoundError:
        pass
    except (js_errors.ServiceUnavailableError, nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
        raise RegistryError(
            f"JetStream is not available on this server ({type(exc).__name__}); run nats-server with -js"
        ) from None
    try:
        kv = await js.create_key_value(bucket=name, history=1, ttl=ttl_s, replicas=jetstream_replicas(nc))
    except js_errors.BadRequestError:
        kv = await js.key_value(name)  # created by someone else meanwhile
    except nats_errors.TimeoutError:  # what a create the server denied looks like from here
        raise RegistryError(
            f"the {name} bucket does not exist and this user may not create it: "
            "start 'hookbus up' (the bus role creates it) or run a hookbus command as the operator"
        ) from None
    return Bucket(name, kv, js)
