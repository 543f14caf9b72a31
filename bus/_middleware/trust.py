"""Trust: whether a declared handler may be executed.

A handler's identity is the hash of its normalised declaration
(:meth:`bus._core.declaration.Declaration.identity`), so changing its code, its fail
mode, its matcher or its before/after references changes it. States:

- Managed: named in the operator's config (``Bus(managed=...)``); runs, needs no approval.
- Trusted: the trust store holds exactly this identity; runs.
- Modified: the trust store holds another identity (it changed since approval); skipped.
- Untrusted: never approved; skipped.

The trust store is the ``hookbus_trust`` KV bucket, so ``hookbus approve`` works
from any machine. ``trust_new`` (development) approves handlers never seen
before on first sight; a Modified handler still needs ``hookbus approve``.
"""

from __future__ import annotations

import enum
import getpass
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from bus._core.declaration import Declaration
from bus._core.errors import ConfigError
from bus._core.schema import decode
from bus._core.subjects import is_qualname
from bus._middleware.schema import TrustApproval, TrustOrder, TrustRecord


class TrustState(enum.StrEnum):
    """Where a handler identity stands with the trust store: whether the kernel runs it, and why."""

    MANAGED = "managed"
    TRUSTED = "trusted"
    MODIFIED = "modified"
    UNTRUSTED = "untrusted"
    #: This version was rejected by an operator (``hookbus reject``): never called, out of the approval queue.
    REJECTED = "rejected"

    @property
    def runs(self) -> bool:
        return self in (TrustState.MANAGED, TrustState.TRUSTED)


def trust_key(decl: Declaration) -> str:
    """The trust store key of a handler: ``<module>.<handler>``."""
    return decl.qualname


def trust_record(decl: Declaration, how: str, previous: bytes | None = None) -> bytes:
    """The trust store value approving ``decl`` as it is declared now.

    ``previous``: the value it replaces; its first approval time is kept, so a
    re-approved handler keeps its place among equal priorities.
    """
    now = time.time()
    record = TrustRecord(
        identity=decl.identity(),
        declaration=decl.to_wire(),
        approved_by=f"{getpass.getuser()}@{socket.gethostname()}",
        how=how,
        at=now,
        first_at=first_approved(previous) or now,
    )
    return msgspec.json.encode(record)


def first_approved(data: bytes | None) -> float | None:
    """When a trust store value's handler was first approved (its ``at`` for records older than ``first_at``)."""
    if not data:
        return None
    try:
        order = decode(data, TrustOrder, "trust value", ValueError)
    except ValueError:
        return None
    moment = order.first_at if order.first_at is not None else order.at
    return moment if moment is not None and moment > 0 else None


def approved_identity(data: bytes | None) -> str | None:
    """The identity a trust store value approves (None if absent or unreadable)."""
    if not data:
        return None
    try:
        return decode(data, TrustApproval, "trust value", ValueError).identity
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Managed:
    """The operator's config: handlers, each named exactly (``module.handler``), that need no approval.

    A whole module is not accepted: it would trust any handler that the
    module's credentials ever announce, not the ones the operator reviewed.
    """

    names: frozenset[str]

    @classmethod
    def of(cls, names: Iterable[str] | None) -> Managed:
        """Raises ConfigError for a name that is not ``module.handler``."""
        chosen = frozenset(names or ())
        for name in sorted(chosen):
            if not is_qualname(name):
                raise ConfigError(
                    f"managed handler {name!r} is not module.handler: name each handler of a module, "
                    "a whole module would trust whatever its credentials announce"
                )
        return cls(chosen)

    def covers(self, decl: Declaration) -> bool:
        return decl.qualname in self.names


def state_of(decl: Declaration, approved: str | None, managed: Managed) -> TrustState:
    """The trust state of a declared handler given the identity the store approves."""
    if managed.covers(decl):
        return TrustState.MANAGED
    if approved is None:
        return TrustState.UNTRUSTED
    return TrustState.TRUSTED if approved == decl.identity() else TrustState.MODIFIED
