"""The claim check's object store: the only code that touches JetStream objects.

Whole payloads of oversized events go to the ``hookbus_payloads`` bucket, a
JetStream object store (stream ``OBJ_hookbus_payloads``) with a retention time
and a size cap. :class:`PayloadStore` writes an object in the object store's
own layout (chunks on ``$O.<bucket>.C.<nuid>``, then its meta on
``$O.<bucket>.M.<name>``), so any NATS client reads it, and reads one back with
direct gets (the meta, then every chunk in one batch), never more chunks than
the meta names nor more bytes than the reference does.

Every participant that may put may also overwrite a meta (subject permissions
cannot tell one object's meta from another's: names are base64 in one token),
so the reference carries size and SHA-256 and the reader refuses anything else.
Nobody but the operator may purge the stream.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import secrets
import time
from datetime import UTC, datetime
from typing import Any, Final

import nats.errors as nats_errors
import nats.js.errors as js_errors
import orjson
from nats.js import api

from bus.core.claim import PAYLOADS_MAX_BYTES, PAYLOADS_TTL_S, check_body, check_ref, reference
from bus.core.errors import PayloadRefError, RegistryError
from bus.core.ratelog import RateLimitedLog
from bus.core.schema import PayloadRefMsg
from bus.core.subjects import (
    PAYLOADS_BUCKET,
    PAYLOADS_CHUNKS,
    PAYLOADS_DIRECT_GET,
    PAYLOADS_METAS,
    PAYLOADS_STREAM,
)
from bus.transport.connection import jetstream_replicas

log = logging.getLogger("hookbus.payloads")

#: Bytes per chunk: well under nats-server's default max_payload (1 MiB), so four puts carry 1 MiB.
CHUNK_BYTES: Final = 256 * 1024
#: How long a whole fetch may take before it is given up.
FETCH_TIMEOUT_S: Final = 15.0
#: After finding no bucket, emitters cut oversized events for this long before looking again.
RETRY_AFTER_S: Final = 30.0
_CHUNKS: Final = PAYLOADS_CHUNKS + "."
_METAS: Final = PAYLOADS_METAS + "."
#: What a JetStream request may raise from nats-py (and asyncio, for a timed-out request).
_FAILURES: Final = (nats_errors.Error, js_errors.Error, TimeoutError)


def _meta_subject(name: str) -> str:
    return _METAS + base64.urlsafe_b64encode(name.encode()).decode()


class PayloadStore:
    """Puts whole payloads in the ``hookbus_payloads`` bucket and fetches them back, checked (an ObjectStore).

    ``put`` never raises: without the bucket (or when a put fails) it returns
    None and the emitter cuts the event to fit instead. ``fetch`` raises
    PayloadRefError naming what was wrong.
    """

    def __init__(self, nc: Any, max_object_bytes: int) -> None:
        self._nc = nc
        self.max_object_bytes = max_object_bytes
        self._absent_until = 0.0
        self._log = RateLimitedLog(log, interval=5.0)

    async def put(self, body: bytes) -> PayloadRefMsg | None:
        """Keep ``body`` (a payload's JSON bytes) whole; its reference, or None if it cannot be kept."""
        if len(body) > self.max_object_bytes or time.monotonic() < self._absent_until:
            return None
        ref = reference(body)
        nuid = secrets.token_hex(11)
        try:
            js = self._nc.jetstream()
            chunks = [body[start : start + CHUNK_BYTES] for start in range(0, len(body), CHUNK_BYTES)]
            # sent in this order on one connection (so stored in it), acknowledged together; the meta only after
            await asyncio.gather(*(js.publish(_CHUNKS + nuid, chunk) for chunk in chunks))
            await js.publish(_meta_subject(ref.name), _meta(ref, nuid), headers={api.Header.ROLLUP: "sub"})
        except (js_errors.NoStreamResponseError, nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
            # no bucket, or no answer (a put this user may not make is dropped unanswered): look again later
            self._absent_until = time.monotonic() + RETRY_AFTER_S
            why = type(exc).__name__
            self._log.warning("no usable %s bucket (%s): oversized events are cut to fit", PAYLOADS_BUCKET, why)
            return None
        except _FAILURES as exc:
            self._log.warning("could not keep %d bytes in %s (%r): cut to fit", len(body), PAYLOADS_BUCKET, exc)
            return None
        return ref

    async def fetch(self, subject: str, ref: PayloadRefMsg) -> bytes:
        """The bytes ``ref`` names, checked against it; PayloadRefError when refused, missing or not the same."""
        check_ref(subject, ref, self.max_object_bytes)
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                data = await self._read(subject, ref)
        except PayloadRefError:
            raise
        except _FAILURES as exc:
            raise PayloadRefError(
                subject, f"could not read object {ref.name} of {PAYLOADS_BUCKET} ({type(exc).__name__})"
            ) from None
        check_body(subject, ref, data)
        return data

    async def _read(self, subject: str, ref: PayloadRefMsg) -> bytes:
        js = self._nc.jetstream()
        try:
            raw = await js.get_msg(PAYLOADS_STREAM, subject=_meta_subject(ref.name), direct=True)
        except js_errors.NotFoundError:
            raise PayloadRefError(
                subject, f"object {ref.name} is not in {PAYLOADS_BUCKET} (expired, deleted or never stored)"
            ) from None
        nuid, chunks = _checked_meta(subject, ref, raw.data)
        if chunks == 0:
            return b""
        return await self._chunks(subject, ref, nuid, chunks)

    async def _chunks(self, subject: str, ref: PayloadRefMsg, nuid: str, chunks: int) -> bytes:
        """The object's chunks in one batched direct get: the server streams them, bounded by count and bytes."""
        nc = self._nc
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        try:
            request = {"seq": 1, "next_by_subj": _CHUNKS + nuid, "batch": chunks}
            await nc.publish(PAYLOADS_DIRECT_GET, orjson.dumps(request), reply=inbox)
            data = bytearray()
            while True:
                msg = await sub.next_msg(timeout=FETCH_TIMEOUT_S)
                status = (msg.headers or {}).get("Status")
                if status == "204":  # end of batch
                    return bytes(data)
                if status is not None or not msg.data:
                    raise PayloadRefError(subject, f"object {ref.name}: a chunk is missing (status {status})")
                data += msg.data
                if len(data) > ref.size:
                    raise PayloadRefError(subject, f"object {ref.name} holds more than the {ref.size} bytes it should")
        finally:
            await sub.unsubscribe()


def _meta(ref: PayloadRefMsg, nuid: str) -> bytes:
    """An object's meta, as JetStream's object store writes it."""
    digest = base64.urlsafe_b64encode(binascii.unhexlify(ref.sha256)).decode()
    chunks = -(-ref.size // CHUNK_BYTES)
    return orjson.dumps(
        {
            "name": ref.name,
            "bucket": PAYLOADS_BUCKET,
            "nuid": nuid,
            "size": ref.size,
            "chunks": chunks,
            "digest": f"SHA-256={digest}",
            "mtime": datetime.now(UTC).isoformat(),
            "options": {"max_chunk_size": CHUNK_BYTES},
        }
    )


def _checked_meta(subject: str, ref: PayloadRefMsg, data: bytes | None) -> tuple[str, int]:
    """The chunk subject token and chunk count of a meta, refused unless it matches ``ref``."""
    try:
        meta = orjson.loads(data or b"")
    except orjson.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict) or meta.get("deleted") is True:
        raise PayloadRefError(subject, f"object {ref.name} was deleted or its meta is not an object store's")
    nuid, size, chunks = meta.get("nuid"), meta.get("size"), meta.get("chunks")
    if not isinstance(nuid, str) or not nuid.isalnum() or type(size) is not int or type(chunks) is not int:
        raise PayloadRefError(subject, f"object {ref.name}: its meta is malformed")
    if size != ref.size:
        raise PayloadRefError(subject, f"object {ref.name} is {size} bytes, the reference says {ref.size}")
    if not 0 <= chunks <= max(ref.size, 1):
        raise PayloadRefError(subject, f"object {ref.name}: {chunks} chunks for {ref.size} bytes")
    return nuid, chunks


async def ensure_payloads_bucket(nc: Any, ttl_s: float = PAYLOADS_TTL_S, max_bytes: int = PAYLOADS_MAX_BYTES) -> None:
    """Create the ``hookbus_payloads`` bucket if missing (``hookbus up``, as the bus role); RegistryError if refused."""
    js = nc.jetstream()
    try:
        await js.object_store(PAYLOADS_BUCKET)
        return
    except js_errors.BucketNotFoundError:
        pass
    except (js_errors.ServiceUnavailableError, nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
        raise RegistryError(f"JetStream is not available on this server ({type(exc).__name__})") from None
    config = api.ObjectStoreConfig(
        bucket=PAYLOADS_BUCKET,
        description="whole payloads of events over the size limit (hookbus claim check)",
        ttl=ttl_s,
        max_bytes=max_bytes,
        replicas=jetstream_replicas(nc),
    )
    try:
        await js.create_object_store(PAYLOADS_BUCKET, config)
    except js_errors.BadRequestError:
        pass  # created by someone else meanwhile
    except _FAILURES as exc:
        raise RegistryError(f"could not create the {PAYLOADS_BUCKET} bucket ({exc!r})") from None
