"""The claim check's rules: how a whole payload is referred to, and what a receiver checks of a reference.

An event over the size limit keeps its whole payload (the JSON object's bytes)
in the ``hookbus_payloads`` object store; its envelope carries a
``payload_ref`` and a preview cut to fit (docs/protocol.md). The I/O is the
transport's (:mod:`bus._transport.objects`); the rules are here, so the emitter
and every receiver apply the same ones.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import orjson

from bus._core.envelope_schema import PayloadRefMsg
from bus._core.errors import PayloadRefError
from bus._core.subjects import PAYLOADS_BUCKET

#: The largest whole payload kept (4 MiB, as PRX caps a hook's payload); larger ones are cut to fit instead.
DEFAULT_MAX_OBJECT_BYTES: Final = 4 * 1024 * 1024
#: How long the bucket keeps an object: receivers fetch at once; tail --full and late workers have an hour.
PAYLOADS_TTL_S: Final = 3600.0
#: The bucket's size cap; when it is full, puts fail and events are cut to fit until objects expire.
PAYLOADS_MAX_BYTES: Final = 1024 * 1024 * 1024


def reference(body: bytes, name: str | None = None) -> PayloadRefMsg:
    """The reference to ``body`` (a payload's JSON bytes) kept as object ``name`` (the store names it;
    without one, the SHA-256)."""
    digest = hashlib.sha256(body).hexdigest()
    return PayloadRefMsg(bucket=PAYLOADS_BUCKET, name=name or digest, size=len(body), sha256=digest)


def check_ref(subject: str, ref: PayloadRefMsg, max_object_bytes: int) -> None:
    """Refuse a reference before fetching: another bucket, or a size over this receiver's cap."""
    if ref.bucket != PAYLOADS_BUCKET:
        raise PayloadRefError(subject, f"bucket {ref.bucket!r} refused: whole payloads are only in {PAYLOADS_BUCKET}")
    if ref.size > max_object_bytes:
        raise PayloadRefError(subject, f"size {ref.size} bytes is over the {max_object_bytes}-byte cap: not fetched")


def check_body(subject: str, ref: PayloadRefMsg, data: bytes) -> None:
    """Refuse fetched bytes that are not what the reference names (replaced, cut or grown by someone)."""
    if len(data) != ref.size:
        raise PayloadRefError(subject, f"object {ref.name} is {len(data)} bytes, the reference says {ref.size}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256:
        raise PayloadRefError(
            subject, f"object {ref.name} has SHA-256 {digest[:16]}…, the reference says {ref.sha256[:16]}…: refused"
        )


def whole_payload(subject: str, data: bytes) -> dict[str, Any]:
    """The checked bytes of a whole payload as the object it must be."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise PayloadRefError(subject, f"the stored payload is not JSON ({exc})") from None
    if type(value) is not dict:
        raise PayloadRefError(subject, f"the stored payload must be a JSON object, not {type(value).__name__}")
    return value
