"""Versions of a handler an operator rejected: out of the approval queue, never called, until a new version.

Kept in the trust bucket beside the approvals and the switches, under
``reject.<module>.<handler>`` (three tokens: never an approval's key; the value
has no ``identity`` field, so nothing reads it as an approval). A rejection
names declaration identities: a changed declaration is a new version and
waits for approval again. Only roles that may approve may reject.
"""

from __future__ import annotations

import time
from typing import Final

import msgspec

from bus._core.declaration import Declaration
from bus._core.schema import decode
from bus._core.subjects import handler_key, handler_of_key
from bus._middleware.schema import RejectRecordMsg
from bus._transport.kv import Bucket

#: The key prefix of a rejection record in the trust bucket.
REJECT_PREFIX: Final = "reject."
#: The most rejected versions one handler's record keeps (the oldest are forgotten: they wait again if they return).
MAX_REJECTED: Final = 32


def reject_key(qualname: str) -> str:
    """``reject.<module>.<handler>``; raises MiddlewareError for a name that is not module.handler."""
    return handler_key(REJECT_PREFIX, qualname)


def rejected_handler(key: str) -> str | None:
    """The ``module.handler`` a trust bucket key records rejections of, or None if it is not a rejection key."""
    return handler_of_key(REJECT_PREFIX, key)


def parse_rejected(data: bytes | None) -> frozenset[str]:
    """The rejected identities a record holds; raises ValueError naming what is wrong."""
    if not data:
        return frozenset()
    return frozenset(decode(data, RejectRecordMsg, "rejection record", ValueError).identities)


async def add_rejection(kv: Bucket, decl: Declaration, actor: str) -> RejectRecordMsg:
    """Record ``decl``'s current identity as rejected by ``actor``; return the record written."""
    key = reject_key(decl.qualname)
    entry = await kv.get(key)
    try:
        held = sorted(parse_rejected(entry.value if entry is not None else None))
    except ValueError:
        held = []  # an unreadable record is overwritten by the operator's next rejection
    identity = decl.identity()
    identities = [*(i for i in held if i != identity), identity][-MAX_REJECTED:]
    record = RejectRecordMsg(identities=identities, by=actor, at=time.time())
    await kv.put(key, msgspec.json.encode(record))
    return record
