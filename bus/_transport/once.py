"""Write-once KV buckets: each key holds one value until it expires, and the server refuses a second write.

The stream keeps one message per subject and discards *new* messages per
subject (``discard_new_per_subject``): a second put on a key, a delete marker
or a purge header included, is refused by the server whatever headers the
writer sends, so the first write of a key wins and nobody can erase it before
its own time to live (``Nats-TTL``, per message) runs out. Reads are direct
gets of one key's subject, which permissions can grant per key prefix.
The asks of :mod:`bus._middleware.asks` are kept this way. On a leaf node
the bucket is the hub's (:mod:`bus._transport.home`), never one of the leaf's.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final

import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js import api

from bus._core.errors import RegistryError
from bus._transport.bucket_stream import StreamBucket
from bus._transport.home import home_of
from bus._transport.kv import bucket_config

_FAILURES = (nats_errors.Error, js_errors.Error, TimeoutError)
#: The server's error code for a message refused by discard-new-per-subject ("maximum messages per subject exceeded").
_SUBJECT_FULL: Final = 10077
#: Seconds a direct get waits: a read the permissions deny gets no answer at all.
READ_TIMEOUT: Final = 2.0


def once_config(name: str, max_age_s: float, replicas: int) -> api.StreamConfig:
    """The stream of a write-once bucket: a hardened bucket's (bus._transport.kv.bucket_config), new
    messages on a key refused, direct gets allowed; ``max_age_s`` 0 keeps keys for good."""
    config = bucket_config(name, max_age_s, replicas)
    config.discard_new_per_subject = True
    config.allow_direct = True
    return config


class OnceBucket(StreamBucket):
    """One write-once bucket: create a key (with its time to live), read a key, list and follow keys."""

    _timeout = READ_TIMEOUT

    def config(self, replicas: int) -> api.StreamConfig:
        return once_config(self.name, self.max_age_s, replicas)

    async def create(self, key: str, value: bytes, ttl_s: float | None) -> bool:
        """Store ``value`` under ``key`` for ``ttl_s`` seconds (None: as long as the bucket keeps it); False if
        the key already holds a value.

        A bucket that does not exist yet is made first (where this user may).
        """
        try:
            return await self._create(key, value, ttl_s)
        except js_errors.NoStreamResponseError:
            await self.ensure()
        try:
            return await self._create(key, value, ttl_s)
        except _FAILURES as exc:
            raise RegistryError(f"bucket {self.name}: create {key} failed ({exc!r})") from None

    async def _create(self, key: str, value: bytes, ttl_s: float | None) -> bool:
        try:
            ttl = None if ttl_s is None else max(1.0, ttl_s)
            home = await home_of(self._nc)
            js = home.jetstream(self._nc, timeout=READ_TIMEOUT)
            await js.publish(home.kv_write(self._prefix + key), value, msg_ttl=ttl)
        except js_errors.NoStreamResponseError:
            raise
        except js_errors.APIError as exc:
            if exc.err_code == _SUBJECT_FULL or "per subject" in str(exc.description or ""):
                return False
            raise RegistryError(f"bucket {self.name}: create {key} failed ({exc!r})") from None
        except _FAILURES as exc:
            raise RegistryError(f"bucket {self.name}: create {key} failed ({exc!r})") from None
        return True

    async def get(self, key: str) -> bytes | None:
        """The key's value, None if it holds none (never written, or expired)."""
        try:
            raw = await (await self._js()).get_msg(self._stream, subject=self._prefix + key, direct=True)
        except (js_errors.NotFoundError, nats_errors.NoRespondersError):
            return None  # no such key, or no bucket yet
        except _FAILURES as exc:
            raise RegistryError(f"bucket {self.name}: get {key} failed ({exc!r})") from None
        data: bytes | None = raw.data
        return data or None

    async def keys(self, pattern: str = ">") -> list[str]:
        """The keys matching ``pattern`` (a subject pattern under the bucket) that hold a value now."""
        try:
            info = await (await self._js()).stream_info(self._stream, subjects_filter=self._prefix + pattern)
        except js_errors.NotFoundError:
            return []  # no bucket yet: nobody asked
        except _FAILURES as exc:
            raise RegistryError(f"bucket {self.name}: list failed ({exc!r})") from None
        prefix = self._prefix
        return sorted(subject[len(prefix) :] for subject in (info.state.subjects or {}) if subject.startswith(prefix))

    def mirror(self, pattern: str) -> KeyMirror:
        """A :class:`KeyMirror` of the keys under ``pattern`` (nothing is sent until its ``start``)."""
        return KeyMirror(self, pattern)

    async def _subscribe(self, pattern: str) -> Any:
        return await (await self._js()).subscribe(
            self._prefix + pattern, ordered_consumer=True, deliver_policy=api.DeliverPolicy.NEW
        )

    async def follow(self, pattern: str = ">") -> AsyncIterator[tuple[str, bytes]]:
        """Each key written under ``pattern`` from now on, with its value (an ordered consumer, new messages only)."""
        try:
            try:
                sub = await self._subscribe(pattern)
            except js_errors.NotFoundError:  # nothing was ever kept: make the bucket (where one may), then follow
                await self.ensure()
                sub = await self._subscribe(pattern)
        except _FAILURES as exc:
            raise RegistryError(f"bucket {self.name}: follow failed ({exc!r})") from None
        try:
            async for msg in sub.messages:
                yield msg.subject[len(self._prefix) :], msg.data
        finally:
            with contextlib.suppress(*_FAILURES):  # the connection went first
                await sub.unsubscribe()


def once_bucket(nc: Any, name: str, max_age_s: float) -> OnceBucket:
    """A write-once bucket on ``nc`` (nothing is sent: the stream is made on the first write that needs it)."""
    return OnceBucket(name, nc, max_age_s)


#: Seconds between a key mirror's heartbeats from the server; three missed ones and the mirror is not trusted.
MIRROR_HEARTBEAT_S: Final = 1.0


class KeyMirror:
    """Every key under one filter of a write-once bucket, held in memory and kept current by the server.

    A push consumer of the filter (named, so permissions can grant it per
    filter) delivers each key's message in order, then heartbeats while idle.
    The mirror is ``live`` only once it has every message the consumer had
    pending at its creation, has seen no gap in the consumer's sequence, and
    heard from the server within three heartbeats; otherwise the caller reads
    the bucket itself (and may :meth:`start` a new mirror).
    """

    def __init__(self, bucket: OnceBucket, pattern: str) -> None:
        self._bucket = bucket
        self._filter = bucket._prefix + pattern
        self.values: dict[str, bytes] = {}
        self._expected = -1  # messages pending at creation (-1: not created yet)
        self._seq = 0  # the consumer sequence of the last message taken
        self._seen = 0.0  # monotonic time of the last message or heartbeat
        self._broken = False
        self._sub: Any = None

    @property
    def live(self) -> bool:
        return (
            not self._broken
            and 0 <= self._expected <= self._seq
            and time.monotonic() - self._seen < 3 * MIRROR_HEARTBEAT_S
        )

    @property
    def broken(self) -> bool:
        """Refused, or created and then lost (a gap, silence past three heartbeats): start another."""
        return self._broken or (self._expected >= 0 and time.monotonic() - self._seen >= 3 * MIRROR_HEARTBEAT_S)

    async def start(self) -> None:
        """Create the consumer and start taking its messages; RegistryError if refused."""
        nc = self._bucket._nc
        inbox = nc.new_inbox()
        try:
            self._sub = await nc.subscribe(inbox, cb=self._on_msg)
            config = api.ConsumerConfig(
                name=f"mirror_{uuid.uuid4().hex[:16]}",
                filter_subject=self._filter,
                deliver_subject=inbox,
                deliver_policy=api.DeliverPolicy.ALL,
                ack_policy=api.AckPolicy.NONE,
                idle_heartbeat=MIRROR_HEARTBEAT_S,
                inactive_threshold=30.0,
                mem_storage=True,
                num_replicas=1,
            )
            info = await (await self._bucket._js()).add_consumer(self._bucket._stream, config)
        except _FAILURES as exc:
            self._broken = True
            await self.stop()
            raise RegistryError(f"bucket {self._bucket.name}: mirror failed ({exc!r})") from None
        self._seen = time.monotonic()
        self._expected = int(info.num_pending or 0) + int(info.delivered.consumer_seq or 0)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(*_FAILURES):
                await self._sub.unsubscribe()
            self._sub = None

    async def _on_msg(self, msg: Any) -> None:
        self._seen = time.monotonic()
        headers = msg.headers or {}
        if headers.get("Status") == "100":  # an idle heartbeat: the last consumer sequence it sent
            last = headers.get("Nats-Last-Consumer")
            if last is not None and int(last) != self._seq:
                self._broken = True
            return
        try:
            seq = int(msg.metadata.sequence.consumer)
        except (nats_errors.Error, ValueError, AttributeError, IndexError):
            seq = -1
        if seq != self._seq + 1:
            self._broken = True
            return
        self._seq = seq
        if msg.data:
            self.values[msg.subject[len(self._bucket._prefix) :]] = msg.data
