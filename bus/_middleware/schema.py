"""The middleware's stored records as wire types: trust, approvals, switches, rejections, guards."""

from __future__ import annotations

from typing import Any

import msgspec

from bus._core.schema import Sha256Hex, Token


class TrustRecord(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_trust`` bucket: the operator approved this identity of a handler."""

    identity: str
    declaration: dict[str, Any]
    approved_by: str
    how: str  # "approved" or "trust-new"
    at: float
    #: When this handler was first approved (kept across re-approvals): equal priorities run in this order.
    first_at: float | None = None


class TrustApproval(msgspec.Struct):
    """What a kernel reads of a trust value: only ``identity`` (docs/protocol.md, Trust)."""

    identity: str


class TrustOrder(msgspec.Struct):
    """What a kernel reads of a trust value to order a chain: when the handler was first approved.

    Records written before ``first_at`` existed give their ``at`` (the last approval) instead.
    """

    at: float | None = None
    first_at: float | None = None


class SwitchRecordMsg(msgspec.Struct, kw_only=True):
    """A ``switch.<module>.<handler>`` value of the trust bucket: the operator's switches of one handler.

    ``agents`` null: the handler applies to every agent (global); a list: only to those agents.
    ``shadow``: the handler runs on live traffic but its decisions are journaled (``would_*``), never applied.
    """

    enabled: bool = True
    agents: list[Token] | None = None
    shadow: bool = False
    by: str = ""
    at: float = 0.0


class RejectRecordMsg(msgspec.Struct, kw_only=True):
    """A ``reject.<module>.<handler>`` value of the trust bucket: the versions of a handler the operator rejected.

    ``identities``: declaration identities, newest last (no field named ``identity``: never read as an approval).
    """

    identities: list[Sha256Hex] = []
    by: str = ""
    at: float = 0.0


class GuardRecordMsg(msgspec.Struct, kw_only=True):
    """A value of the ``hookbus_guards`` bucket: a fail-closed handler that stays in force."""

    identity: str
    declaration: dict[str, Any]  # its own rules: bus._core.declaration.from_wire
    at: float | None = None  # Unix time the module started serving (absent: unknown)
    stopped_at: float | None = None  # Unix time it stopped cleanly, if it did
