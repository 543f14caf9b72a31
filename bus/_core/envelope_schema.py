"""The event envelope's one declared type, ``EnvelopeMsg``, and its claim-check reference.

The delivery path decodes envelopes with the hand-written check of :mod:`bus._core.envelope` (faster, and
without msgspec at import); tests/core/test_envelope_one_type.py holds the check, ``EventDict`` and ``Event`` to
this type, field by field and on generated envelopes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from bus._core.schema import NonNegative, Sha256Hex


class PayloadRefMsg(msgspec.Struct, kw_only=True):
    """An envelope's ``payload_ref``: the whole payload is the object ``name`` of ``bucket`` (the claim check).

    Receivers re-check it before fetching (bucket ``hookbus_payloads``, size
    within their cap) and after (the object's bytes have this size and SHA-256).
    """

    bucket: str
    name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_=-]{1,128}$")]
    size: NonNegative  # bytes of the payload's JSON object
    sha256: Sha256Hex  # of those bytes


#: What a receiver completed, in an event's ``received_as``: a PRX envelope without ``id`` or
#: ``depth``, or a bare PRX payload object wrapped as the event of its subject.
ReceivedAs = Literal["prx-envelope", "prx-payload"]


class EnvelopeMsg(msgspec.Struct, kw_only=True):
    """An event on its subject (docs/events.md). Receivers decode it with the hand-written check in
    bus._core.envelope (faster on the delivery path); a test holds the two to the same verdicts.

    ``id`` and ``depth`` may be missing (PRX documents its envelope without them): the receiver
    assigns an id, takes depth 0 and sets ``received_as`` to ``prx-envelope``. On
    ``prx.lifecycle.<event>`` an object with neither ``event`` nor ``payload`` is not an envelope
    but a bare payload (what PRX's agent publishes): the receiver wraps it as that event (receipt
    time, ``session_id`` null, depth 0, an id of its own) with ``received_as`` ``prx-payload``.
    """

    event: str  # the subject's event name (checked against the subject by the receiver)
    timestamp: str
    session_id: str | None  # required, may be null
    payload: dict[str, Any]
    id: str | msgspec.UnsetType = msgspec.UNSET  # absent: assigned on receipt
    depth: NonNegative = 0  # and below the receiver's limit
    source: str | None = None
    truncated: Any = False  # only ``true`` means cut
    received_as: Any = None  # set by receivers only (ReceivedAs); what a sender puts here is ignored
    payload_ref: PayloadRefMsg | None = None  # set: ``payload`` is a preview, the whole is in the object store
    traceparent: Any = None  # the emitter's W3C trace context; only a valid one is kept (bus._core.traceparent)
