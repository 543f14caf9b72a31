"""Stored handler records as wire types: a record and its approved version."""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

from bus._core.schema import Sha256Hex, Token

#: The largest record source a store accepts (characters): a handler, not a program.
RECORD_MAX_SOURCE: Final = 64 * 1024


class HandlerRecordMsg(msgspec.Struct, kw_only=True):
    """A stored handler record (``hookbus_records``, docs/records.md): a declaration and its Python source.

    ``author``, ``at`` and ``note`` are informational and outside the record's identity.
    """

    name: Token
    stage: str
    source: Annotated[str, msgspec.Meta(max_length=RECORD_MAX_SOURCE)]
    match: list[str] = []
    when: dict[str, Any] = {}
    before: list[str] = []
    after: list[str] = []
    #: Bag ports (docs/middleware.md, The bag): what it reads (a key or ``{key, default, required}``) and writes.
    inputs: list[str | dict[str, Any]] = []
    outputs: list[str] = []
    fail_closed: bool = False
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    enabled: bool = True
    author: str | None = None
    at: float = 0.0
    note: str | None = None


class ApprovedRecordMsg(msgspec.Struct, kw_only=True):
    """The runner's copy of an approved record version (``hookbus_records_approved``), kept apart from the drafts."""

    record: HandlerRecordMsg
    identity: Sha256Hex  # the record's declaration identity when it was approved
    disabled: str | None = None  # why a runner disabled it (kept failing); cleared by a new approved version
    at: float = 0.0
