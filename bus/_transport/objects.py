"""The claim check's store: the only code that touches the ``hookbus_payloads`` stream.

Whole payloads of oversized events go to the ``hookbus_payloads`` bucket, the
stream ``OBJ_hookbus_payloads`` with a retention time and a size cap, laid out
per publisher: the chunks of every object a NATS user puts are on
``$O.hookbus_payloads.C.<user>`` and their metas on
``$O.hookbus_payloads.M.<user>`` (each user may publish on its own two subjects
only). The stream keeps at most :data:`PUBLISHER_MESSAGES` messages per
subject and none bigger than a chunk, so one publisher's flood evicts only its
own oldest objects, never another's; it refuses ``Nats-Rollup`` headers and
purges, so nobody erases what others put. An object's name (in its
reference) is the stream sequence of its meta; the meta lists the sequence of
each chunk. :class:`PayloadStore` reads an object back with direct gets (the
meta, then its chunks), never more chunks than the meta names nor more bytes
than the reference does, and refuses a meta or chunk found on any subject but
one publisher's own.

The reference carries size and SHA-256 and the reader refuses anything else:
what a sequence names is only ever what its publisher stored, but the
reference itself comes from whoever published the event.

On a leaf node the stream is the hub's (:mod:`bus._transport.home`): puts on
``$O.`` subjects cross the leaf node link as they are, and gets, stream info
and creates go through the hub domain's API prefix; the leaf keeps no copy.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from datetime import UTC, datetime
from typing import Any, Final

import nats.errors as nats_errors
import nats.js.errors as js_errors
import orjson
from nats.js import api

from bus._core.claim import PAYLOADS_MAX_BYTES, PAYLOADS_TTL_S, check_body, check_ref, reference
from bus._core.envelope_schema import PayloadRefMsg
from bus._core.errors import PayloadRefError, RegistryError
from bus._core.subjects import (
    PAYLOADS_BUCKET,
    PAYLOADS_CHUNKS,
    PAYLOADS_METAS,
    PAYLOADS_STREAM,
    payload_subjects,
)
from bus._runtime.ratelog import RateLimitedLog
from bus._transport.connection import INBOX_ROOT, jetstream_replicas
from bus._transport.home import home_of
from bus._transport.kv import kept_stream

log = logging.getLogger("hookbus.payloads")

#: Bytes per chunk: well under nats-server's default max_payload (1 MiB), so four puts carry 1 MiB.
CHUNK_BYTES: Final = 256 * 1024
#: The stream keeps no message bigger than a chunk (a meta is far smaller).
MAX_MESSAGE_BYTES: Final = CHUNK_BYTES
#: Messages the stream keeps per subject, so per publisher (its chunks, its metas): 64 MiB of chunks at
#: most; a publisher putting more evicts its own oldest objects, never another's.
PUBLISHER_MESSAGES: Final = 256
#: How long a whole fetch may take before it is given up.
FETCH_TIMEOUT: Final = 15.0
#: After finding no bucket, emitters cut oversized events for this long before looking again.
RETRY_AFTER_S: Final = 30.0
_CHUNKS: Final = PAYLOADS_CHUNKS + "."
_METAS: Final = PAYLOADS_METAS + "."
#: Who publishes without a user of its own (a server without accounts: one publisher for all).
ANONYMOUS: Final = "anyone"
#: What a JetStream request may raise from nats-py (and asyncio, for a timed-out request).
_FAILURES: Final = (nats_errors.Error, js_errors.Error, TimeoutError)


def publisher_of(nc: Any) -> str:
    """The subject tokens naming this connection's NATS user: what its private inbox prefix names."""
    prefix = bytes(getattr(nc, "_inbox_prefix", b"")).decode()
    user = prefix[len(INBOX_ROOT) + 1 :] if prefix.startswith(INBOX_ROOT + ".") else ""
    return user or ANONYMOUS


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
        self._chunks, self._metas = payload_subjects(publisher_of(nc))

    async def put(self, body: bytes) -> PayloadRefMsg | None:
        """Keep ``body`` (a payload's JSON bytes) whole; its reference, or None if it cannot be kept."""
        if len(body) > self.max_object_bytes or time.monotonic() < self._absent_until:
            return None
        try:
            js = (await home_of(self._nc)).jetstream(self._nc)
            chunks = [body[start : start + CHUNK_BYTES] for start in range(0, len(body), CHUNK_BYTES)]
            # sent at once, acknowledged together (each ack names its chunk's sequence); the meta only after
            acks = await asyncio.gather(*(js.publish(self._chunks, chunk) for chunk in chunks))
            ref = reference(body)
            meta = await js.publish(self._metas, _meta(ref, [int(ack.seq) for ack in acks]))
        except (js_errors.NoStreamResponseError, nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
            # no bucket, or no answer (a put this user may not make is dropped unanswered): look again later
            self._absent_until = time.monotonic() + RETRY_AFTER_S
            why = type(exc).__name__
            self._log.warning("no usable %s bucket (%s): oversized events are cut to fit", PAYLOADS_BUCKET, why)
            return None
        except _FAILURES as exc:
            self._log.warning("could not keep %d bytes in %s (%r): cut to fit", len(body), PAYLOADS_BUCKET, exc)
            return None
        return reference(body, name=str(meta.seq))

    async def fetch(self, subject: str, ref: PayloadRefMsg) -> bytes:
        """The bytes ``ref`` names, checked against it; PayloadRefError when refused, missing or not the same."""
        check_ref(subject, ref, self.max_object_bytes)
        try:
            async with asyncio.timeout(FETCH_TIMEOUT):
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
        if not ref.name.isdigit() or not 0 < int(ref.name) < 2**63:
            raise PayloadRefError(
                subject, f"object {ref.name!r} is not in {PAYLOADS_BUCKET} (its objects are named by sequence)"
            )
        raw = await self._get(subject, ref, int(ref.name))
        meta_subject = raw.subject or ""
        if not meta_subject.startswith(_METAS):
            raise PayloadRefError(subject, f"object {ref.name} is not a meta of {PAYLOADS_BUCKET}")
        seqs = _checked_meta(subject, ref, raw.data)
        chunk_subject = _CHUNKS + meta_subject[len(_METAS) :]  # its publisher's own chunks, nobody else's
        parts = await asyncio.gather(*(self._get(subject, ref, seq) for seq in seqs))
        if any(part.subject != chunk_subject for part in parts):
            raise PayloadRefError(subject, f"object {ref.name}: a chunk is not its publisher's")
        data = b"".join(part.data or b"" for part in parts)
        if len(data) > ref.size:
            raise PayloadRefError(subject, f"object {ref.name} holds more than the {ref.size} bytes it should")
        return data

    async def _get(self, subject: str, ref: PayloadRefMsg, seq: int) -> Any:
        try:
            js = (await home_of(self._nc)).jetstream(self._nc)
            return await js.get_msg(PAYLOADS_STREAM, seq=seq, direct=True)
        except js_errors.NotFoundError:
            raise PayloadRefError(
                subject, f"object {ref.name} is not in {PAYLOADS_BUCKET} (expired, evicted or never stored)"
            ) from None


def _meta(ref: PayloadRefMsg, seqs: list[int]) -> bytes:
    """An object's meta: its size and digest, and the sequence of each of its chunks in order."""
    digest = base64.urlsafe_b64encode(binascii.unhexlify(ref.sha256)).decode()
    return orjson.dumps(
        {
            "bucket": PAYLOADS_BUCKET,
            "size": ref.size,
            "chunks": seqs,
            "digest": f"SHA-256={digest}",
            "mtime": datetime.now(UTC).isoformat(),
            "options": {"max_chunk_size": CHUNK_BYTES},
        }
    )


def _checked_meta(subject: str, ref: PayloadRefMsg, data: bytes | None) -> list[int]:
    """The chunk sequences of a meta, refused unless it matches ``ref``."""
    try:
        meta = orjson.loads(data or b"")
    except orjson.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict):
        raise PayloadRefError(subject, f"object {ref.name}: its meta is not one")
    size, seqs = meta.get("size"), meta.get("chunks")
    if type(size) is not int or not isinstance(seqs, list) or any(type(seq) is not int or seq <= 0 for seq in seqs):
        raise PayloadRefError(subject, f"object {ref.name}: its meta is malformed")
    if size != ref.size:
        raise PayloadRefError(subject, f"object {ref.name} is {size} bytes, the reference says {ref.size}")
    if len(seqs) != -(-ref.size // CHUNK_BYTES):
        raise PayloadRefError(subject, f"object {ref.name}: {len(seqs)} chunks for {ref.size} bytes")
    return seqs


def payloads_config(
    ttl_s: float = PAYLOADS_TTL_S, max_bytes: int = PAYLOADS_MAX_BYTES, replicas: int = 1
) -> api.StreamConfig:
    """The ``hookbus_payloads`` stream as hookbus keeps it: per-publisher quotas, no rollup, no purge."""
    return kept_stream(
        name=PAYLOADS_STREAM,
        description="whole payloads of events over the size limit (hookbus claim check)",
        subjects=[_CHUNKS + ">", _METAS + ">"],
        max_age=ttl_s,
        max_bytes=max_bytes,
        max_msgs_per_subject=PUBLISHER_MESSAGES,
        max_msg_size=MAX_MESSAGE_BYTES,
        num_replicas=replicas,
        allow_direct=True,
    )


async def ensure_payloads_bucket(nc: Any, ttl_s: float = PAYLOADS_TTL_S, max_bytes: int = PAYLOADS_MAX_BYTES) -> None:
    """Create the ``hookbus_payloads`` stream, or bring an older one to :func:`payloads_config` (``hookbus up``,
    as the bus role); RegistryError if refused."""
    js = (await home_of(nc)).jetstream(nc)
    config = payloads_config(ttl_s, max_bytes, jetstream_replicas(nc))
    try:
        info = await js.stream_info(PAYLOADS_STREAM)
    except js_errors.NotFoundError:
        info = None
    except (js_errors.ServiceUnavailableError, nats_errors.NoRespondersError, nats_errors.TimeoutError) as exc:
        raise RegistryError(f"JetStream is not available on this server ({type(exc).__name__})") from None
    try:
        if info is None:
            try:
                await js.add_stream(config)
                return
            except js_errors.BadRequestError:
                info = await js.stream_info(PAYLOADS_STREAM)  # created by someone else meanwhile
        if _hardened(info.config):
            return
        config.num_replicas = info.config.num_replicas
        await js.update_stream(config)
        log.warning(
            "the %s bucket was made by an older hookbus: now per publisher, no rollup, no purge", PAYLOADS_BUCKET
        )
    except _FAILURES as exc:
        raise RegistryError(
            f"could not create or update the {PAYLOADS_BUCKET} bucket ({exc!r}); an older hookbus made it: "
            f"run 'hookbus up' once as the operator, or delete the stream {PAYLOADS_STREAM}"
        ) from None


def _hardened(config: Any) -> bool:
    return (
        not config.allow_rollup_hdrs
        and bool(config.deny_purge)
        and config.max_msgs_per_subject == PUBLISHER_MESSAGES
        and config.max_msg_size == MAX_MESSAGE_BYTES
    )
