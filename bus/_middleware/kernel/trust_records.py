"""The trust store and the guard records as the kernel knows them: approvals, switches, rejections, guards.

The :class:`~bus._middleware.kernel.view.View` feeds each entry its watches
deliver to :class:`TrustRecords` and rebuilds its chains when one changed what
is known.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from bus._middleware.guards import GUARDS_BUCKET, GuardRecord, parse_record
from bus._middleware.rejections import parse_rejected, rejected_handler
from bus._middleware.switches import DEFAULT as DEFAULT_SWITCHES
from bus._middleware.switches import Switches, parse_switches, switched_handler
from bus._middleware.trust import approved_identity, first_approved

log = logging.getLogger("hookbus.middleware")

T = TypeVar("T")


@dataclass
class TrustRecords:
    """What the trust and guard buckets hold, by handler (each dict updated in place, never replaced)."""

    #: qualname -> the approved identity.
    approved: dict[str, str] = field(default_factory=dict)
    #: qualname -> Unix time first approved: equal priorities run in this order.
    first_approved: dict[str, float] = field(default_factory=dict)
    #: qualname -> the operator's switches (absent: enabled, global).
    switches: dict[str, Switches] = field(default_factory=dict)
    #: qualname -> the identities an operator rejected (``hookbus reject``): never queued, never called.
    rejected: dict[str, frozenset[str]] = field(default_factory=dict)
    #: guard record key -> the fail-closed handler a module recorded.
    guards: dict[str, GuardRecord] = field(default_factory=dict)

    def on_trust(self, key: str, data: bytes | None) -> bool:
        """Take in one trust store entry (an approval, a switch, a rejection); whether anything changed."""
        switched = switched_handler(key)
        if switched is not None:
            return _take(self.switches, "switch", switched, data, parse_switches, DEFAULT_SWITCHES)
        rejected = rejected_handler(key)
        if rejected is not None:
            return _take(self.rejected, "rejection", rejected, data, parse_rejected, frozenset())
        identity = approved_identity(data)
        _put(self.approved, key, identity)
        _put(self.first_approved, key, None if identity is None else first_approved(data))
        return True

    def on_guard(self, key: str, data: bytes | None, revision: int) -> bool:
        """Take in one guard record (None: deleted, or gone without a marker at revision 0); whether it changed."""
        if data is None and revision == 0 and key in self.guards:
            # gone without a delete marker (purged, or missing from a new watch): what erased it is not the
            # record's writer nor the operator, so the guard holds on (docs/security.md, Integrity)
            log.error("guard record %s vanished from %s without a detach: still enforced", key, GUARDS_BUCKET)
            return False
        if data is None:
            self.guards.pop(key, None)
        else:
            try:
                self.guards[key] = parse_record(key, data)
            except ValueError as exc:
                log.warning("%s: ignored", exc)
                return False
        return True


def _put(table: dict[str, T], key: str, value: T | None) -> None:
    """Keep ``value`` under ``key``, or forget the key when there is none."""
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _take(
    table: dict[str, T], what: str, qualname: str, data: bytes | None, parse: Callable[[bytes | None], T], unset: T
) -> bool:
    """Take in one handler's record of ``what`` into ``table`` (``unset``: nothing kept); whether it changed."""
    try:
        value = parse(data)
    except ValueError as exc:
        log.warning("%s record of %s is malformed (%s): ignored", what, qualname, exc)
        return False
    _put(table, qualname, None if value == unset else value)
    return True
