"""A handler record: a handler's declaration plus its Python source, stored on the bus.

A record is normalised before anything is derived from it (line endings and
trailing spaces of the source, sorted references and matcher, float timeout),
and its identity is the identity of the declaration the runner announces for
it, whose ``code`` is the SHA-256 of the normalised source and the ``enabled``
flag: trust by identity hash applies to records unchanged (a new or edited
record waits for ``hookbus approve``; disabling one is a change too).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from bus._core.declaration import Declaration, declare
from bus._core.errors import DeclarationError, RecordError, StageError
from bus._core.schema import convert, decode
from bus._core.subjects import TOKEN_RE
from bus._records.schema import HandlerRecordMsg
from bus._records.subjects import RECORDS_MODULE


@dataclass(frozen=True, slots=True)
class Record:
    """One stored handler, normalised; ``msg`` keeps the wire form (with its informational fields)."""

    msg: HandlerRecordMsg

    @property
    def name(self) -> str:
        return self.msg.name

    @property
    def stage(self) -> str:
        return self.msg.stage

    @property
    def enabled(self) -> bool:
        return self.msg.enabled

    @property
    def source(self) -> str:
        return self.msg.source

    def code_digest(self) -> str:
        """SHA-256 of what the declaration does not carry: the source and whether it is enabled."""
        body = orjson.dumps({"source": self.msg.source, "enabled": self.msg.enabled}, option=orjson.OPT_SORT_KEYS)
        return "record:" + hashlib.sha256(body).hexdigest()

    def declaration(self, module: str = RECORDS_MODULE) -> Declaration:
        """The declaration a runner serving under ``module`` announces for this record."""
        msg = self.msg
        extra: dict[str, Any] = {"when": msg.when} if msg.when else {}  # left out when empty: older kernels
        if msg.inputs:
            extra["inputs"] = msg.inputs
        if msg.outputs:
            extra["outputs"] = msg.outputs
        try:
            return declare(
                module,
                msg.name,
                msg.stage,
                fail_closed=msg.fail_closed,
                timeout=msg.timeout,
                before=msg.before,
                after=msg.after,
                match=msg.match or None,
                code=self.code_digest(),
                **extra,
            )
        except (DeclarationError, StageError) as exc:
            raise RecordError(msg.name, exc.reason) from None

    def identity(self, module: str = RECORDS_MODULE) -> str:
        return self.declaration(module).identity()

    def to_bytes(self) -> bytes:
        return msgspec.json.encode(self.msg)

    def with_changes(self, **changes: Any) -> Record:
        """A copy with fields changed (``enabled=False``, ``before=[...]``), normalised again."""
        return make(msgspec.structs.replace(self.msg, **changes))


def normalise_source(source: str) -> str:
    """One text for one program: ``\\n`` line endings, no trailing spaces, no blank lines around it."""
    lines = [line.rstrip() for line in source.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def make(msg: HandlerRecordMsg) -> Record:
    """Normalise and check a record; RecordError naming the record and what is wrong."""
    if not TOKEN_RE.fullmatch(msg.name):
        raise RecordError(msg.name, "the name must match [A-Za-z0-9_-]+")
    if not msg.source.strip():
        raise RecordError(msg.name, "the source is empty: it must define async def handle(stage, payload, ctx)")
    record = Record(
        msgspec.structs.replace(
            msg,
            source=normalise_source(msg.source),
            match=sorted(set(msg.match)),
            before=sorted(set(msg.before)),
            after=sorted(set(msg.after)),
            timeout=float(msg.timeout),
        )
    )
    record.declaration()  # the declaration rules (stage, references, timeout clamp), raised as RecordError
    return record


def parse(data: bytes, key: str | None = None) -> Record:
    """A record from the store; its key must be its name. RecordError names what is wrong."""
    where = key or "?"
    msg = decode(data, HandlerRecordMsg, f"handler record {where}", ValueError, None) if data else None
    if msg is None:
        raise RecordError(where, "empty value")
    if key is not None and msg.name != key:
        raise RecordError(where, f"stored under {key!r} but named {msg.name!r}")
    return make(msg)


def parse_safely(data: bytes, key: str | None = None) -> Record:
    """:func:`parse`, with msgspec's complaints (a field of the wrong type) as RecordError too."""
    try:
        return parse(data, key)
    except RecordError:
        raise
    except ValueError as exc:
        raise RecordError(key or "?", str(exc)) from None


def from_fields(fields: dict[str, Any], *, author: str | None = None) -> Record:
    """A record from a tool's or a command's fields (a JSON object); RecordError naming the field."""
    name = str(fields.get("name", "?"))
    try:
        msg = convert({**fields, "author": author, "at": time.time()}, HandlerRecordMsg, "record", ValueError)
    except ValueError as exc:
        raise RecordError(name, str(exc)) from None
    return make(msg)
