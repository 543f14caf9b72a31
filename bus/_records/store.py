"""The record store: drafts in ``hookbus_records``, approved copies in ``hookbus_records_approved``.

Whoever may write drafts (an agent, through its tools) writes only versions
that wait for approval: a record runs only when the trust store approves its
identity. The runner copies a version into the approved bucket once it sees it
approved, and serves from that copy, so deleting or rewriting a draft never
removes what an operator approved; only an operator removes a record
(:meth:`RecordStore.remove`: draft, copy and approval).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from bus._core.errors import RecordError
from bus._core.schema import decode
from bus._core.stages import phase
from bus._core.subjects import RECORDS_APPROVED_BUCKET, RECORDS_BUCKET
from bus._journal.entries import JournalEntry, publish_entry
from bus._middleware.registry import LOAD_WITHIN_S, TRUST_BUCKET
from bus._middleware.trust import approved_identity, trust_record
from bus._records.record import Record, parse_safely
from bus._records.schema import ApprovedRecordMsg
from bus._records.subjects import RECORDS_MODULE
from bus._transport.kv import Bucket
from bus._transport.port import Port

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Approved:
    """The runner's copy of an approved version; ``disabled`` says why a runner took it out of service."""

    record: Record
    identity: str
    disabled: str | None = None
    at: float = 0.0

    def to_bytes(self) -> bytes:
        msg = ApprovedRecordMsg(record=self.record.msg, identity=self.identity, disabled=self.disabled, at=self.at)
        return msgspec.json.encode(msg)


def parse_approved(key: str, data: bytes) -> Approved:
    """An approved copy; RecordError if malformed or if its record does not hash to the identity it claims."""
    try:
        msg = decode(data, ApprovedRecordMsg, f"approved record {key}", ValueError)
    except ValueError as exc:
        raise RecordError(key, str(exc)) from None
    record = parse_safely(msgspec.json.encode(msg.record), key)
    return Approved(record, msg.identity, msg.disabled, msg.at)


class RecordStore:
    """Reads and writes records on one bus; ``module`` is the name runners serve them under."""

    def __init__(self, port: Port, module: str = RECORDS_MODULE) -> None:
        self.port = port
        self.module = module
        self._drafts: Bucket | None = None
        self._approved: Bucket | None = None

    async def drafts(self) -> Bucket:
        if self._drafts is None:
            self._drafts = await self.port.open_bucket(RECORDS_BUCKET)
        return self._drafts

    async def approved_bucket(self) -> Bucket:
        if self._approved is None:
            self._approved = await self.port.open_bucket(RECORDS_APPROVED_BUCKET)
        return self._approved

    def key(self, name: str) -> str:
        """A record's key in both buckets: ``<module>.<name>`` (each runner module has its own records)."""
        return f"{self.module}.{name}"

    def name_of(self, key: str) -> str | None:
        """The record name of a key of this module, None for another module's key."""
        module, dot, name = key.partition(".")
        return name if dot and module == self.module else None

    async def get(self, name: str) -> Record | None:
        entry = await (await self.drafts()).get(self.key(name))
        return None if entry is None or entry.value is None else parse_safely(entry.value, name)

    async def get_approved(self, name: str) -> Approved | None:
        entry = await (await self.approved_bucket()).get(self.key(name))
        return None if entry is None or entry.value is None else parse_approved(name, entry.value)

    async def put(self, record: Record) -> str:
        """Write a draft; returns its identity (what ``hookbus approve`` will approve)."""
        await (await self.drafts()).put(self.key(record.name), record.to_bytes())
        return record.identity(self.module)

    async def all(self) -> dict[str, Record | RecordError]:
        """Every draft of this module by name (a malformed one as the error saying why)."""
        return await self._load(await self.drafts(), lambda name, data: parse_safely(data, name))

    async def approved(self) -> dict[str, Approved | RecordError]:
        return await self._load(await self.approved_bucket(), parse_approved)

    async def keep_approved(self, copy: Approved) -> None:
        await (await self.approved_bucket()).put(self.key(copy.record.name), copy.to_bytes())

    async def _load(self, bucket: Bucket, parse: Callable[[str, bytes], T]) -> dict[str, T | RecordError]:
        loaded = await _load(bucket, lambda key, data: (key, data))
        out: dict[str, T | RecordError] = {}
        for key, item in loaded.items():
            name = self.name_of(key)
            if name is not None and not isinstance(item, RecordError):
                try:
                    out[name] = parse(name, item[1])
                except RecordError as exc:
                    out[name] = exc
        return out

    async def trusted(self, name: str) -> str | None:
        """The identity the trust store approves for ``<module>.<name>`` (None: none)."""
        entry = await (await self.port.open_bucket(TRUST_BUCKET)).get(f"{self.module}.{name}")
        return approved_identity(entry.value if entry else None)

    async def approve(self, record: Record, actor: str, how: str = "approved") -> None:
        """What an operator does: approve this version in the trust store (``records put --approve``); journaled."""
        decl = record.declaration(self.module)
        kv = await self.port.open_bucket(TRUST_BUCKET)
        previous = await kv.get(decl.qualname)  # its first approval time is kept (the chain's tie order)
        await kv.put(decl.qualname, trust_record(decl, how, previous.value if previous else None))
        entry = JournalEntry("middleware", decl.stage, phase(decl.stage), decl.qualname, "approved")
        entry.cause = f"approved by {actor}"
        entry.identity = decl.identity()
        await publish_entry(self.port, entry)

    async def remove(self, name: str) -> None:
        """What an operator does: the draft, the approved copy and the approval go."""
        for bucket in (await self.drafts(), await self.approved_bucket()):
            await bucket.delete(self.key(name))
        await (await self.port.open_bucket(TRUST_BUCKET)).delete(f"{self.module}.{name}")


async def every_record(port: Port) -> dict[str, Record | RecordError]:
    """Every module's drafts by key (``<module>.<name>``), a malformed one as the error saying why."""
    drafts = await port.open_bucket(RECORDS_BUCKET)
    return await _load(drafts, lambda key, data: parse_safely(data, key.partition(".")[2]))


async def _load(bucket: Bucket, parse: Callable[[str, bytes], T]) -> dict[str, T | RecordError]:
    """Every stored key of a bucket, parsed (a malformed one as the error saying why); bounded in time."""
    out: dict[str, T | RecordError] = {}
    for key, value in (await bucket.stored(LOAD_WITHIN_S)).items():
        try:
            out[key] = parse(key, value)
        except RecordError as exc:
            out[key] = exc
    return out
