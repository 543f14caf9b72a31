"""Guard records: a fail-closed handler stays in force after its module is gone.

A module puts one record per ``fail_closed`` handler in the ``hookbus_guards``
KV bucket when it starts serving (key ``<module>.<handler>.<identity16>``). A
kernel that trusts that identity keeps cancelling the handler's stage while no
live instance declares it (gone, stopped, waiting for approval of a changed
version), from the record alone, so a kernel started after the death enforces
it too. Only an operator ends it (:func:`detach`, ``hookbus detach NAME``), or
the module coming back.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from bus._core.declaration import Declaration, from_wire
from bus._core.errors import MiddlewareError
from bus._core.schema import decode
from bus._core.subjects import GUARDS_BUCKET as GUARDS_BUCKET
from bus._middleware.schema import GuardRecordMsg
from bus._transport.kv import Bucket

#: Hex digits of the identity in a record's key (enough to tell versions apart).
KEY_IDENTITY = 16


@dataclass(frozen=True, slots=True)
class GuardRecord:
    """One attached fail-closed handler, as its module recorded it."""

    decl: Declaration
    identity: str
    at: float  # Unix time the module put the record (it started serving)
    stopped_at: float | None = None  # Unix time it stopped cleanly, if it did

    @property
    def key(self) -> str:
        return guard_key(self.decl)

    def to_bytes(self) -> bytes:
        record = GuardRecordMsg(
            identity=self.identity, declaration=self.decl.to_wire(), at=self.at, stopped_at=self.stopped_at
        )
        return msgspec.json.encode(record)


def guard_key(decl: Declaration) -> str:
    return f"{decl.qualname}.{decl.identity()[:KEY_IDENTITY]}"


def parse_record(key: str, data: bytes) -> GuardRecord:
    """Decode a record; raise ValueError naming what is wrong (it must hash to its key)."""
    record = decode(data, GuardRecordMsg, f"guard record {key}", ValueError)
    try:
        decl = from_wire(record.declaration)
    except (KeyError, TypeError, ValueError, MiddlewareError) as exc:
        raise ValueError(f"guard record {key} is malformed: {exc!r}") from None
    identity = decl.identity()
    if guard_key(decl) != key or record.identity != identity:
        raise ValueError(f"guard record {key} does not match its declaration")
    if not decl.fail_closed:
        raise ValueError(f"guard record {key} is of a fail-open handler")
    return GuardRecord(decl, identity, record.at or 0.0, record.stopped_at)


async def put_records(kv: Bucket, decls: Iterable[Declaration]) -> list[str]:
    """What a starting module does: one record per fail-closed handler; returns their keys."""
    keys = []
    now = time.time()
    for decl in decls:
        if decl.fail_closed:
            record = GuardRecord(decl, decl.identity(), now)
            await kv.put(record.key, record.to_bytes())
            keys.append(record.key)
    return keys


async def mark_stopped(kv: Bucket, decls: Iterable[Declaration]) -> None:
    """What a module stopping cleanly does: its records say since when (they stay in force)."""
    now = time.time()
    for decl in decls:
        if decl.fail_closed:
            await kv.put(guard_key(decl), GuardRecord(decl, decl.identity(), now, now).to_bytes())


async def remove_records(kv: Bucket, decls: Iterable[Declaration]) -> None:
    """What a module serving with ``detach_on_stop`` does when it stops cleanly: its guards end."""
    for decl in decls:
        if decl.fail_closed:
            await kv.delete(guard_key(decl))


def designates(name: str, decl: Declaration) -> bool:
    """Whether ``name`` (``module`` or ``module.handler``) names ``decl``."""
    return name in (decl.module, decl.qualname)


async def detach(kv: Bucket, records: Iterable[GuardRecord], name: str) -> list[GuardRecord]:
    """Delete the records ``name`` designates; return those deleted."""
    chosen = [record for record in records if designates(name, record.decl)]
    for record in chosen:
        try:
            await kv.delete(record.key)
        except MiddlewareError as exc:
            raise MiddlewareError(f"could not detach {record.decl.qualname}: {exc}") from None
    return chosen
