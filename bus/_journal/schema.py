"""A journal entry's wire type and its bounds."""

from __future__ import annotations

from typing import Annotated

import msgspec

from bus._core.schema import Text

#: Depths the journal takes: far beyond any recursion limit, and well inside SQLite's integers.
JOURNAL_MAX_DEPTH = 2**31 - 1
#: A duration beyond this (about 31 years) is not a duration.
JOURNAL_MAX_DURATION_MS = 1e12


class JournalEntryMsg(msgspec.Struct, kw_only=True):
    """On ``hookbus.journal.<kind>[.<origin>]``: one intervention or reaction (docs/journal.md).

    The schema checks types and ranges; the receiver then caps long texts and
    replaces NUL (bus._journal.entries), so an entry from anyone can be stored.
    """

    kind: Text
    point: Text
    phase: Text
    who: Text
    decision: Text
    cause: Text | None = None
    duration_ms: Annotated[float, msgspec.Meta(ge=0, le=JOURNAL_MAX_DURATION_MS)] | None = None
    session: Text | None = None
    agent: Text | None = None
    depth: Annotated[int, msgspec.Meta(ge=0, le=JOURNAL_MAX_DEPTH)] = 0
    trace_id: Text | None = None
    identity: Text | None = None
    process: Text
    time: Text
    id: Text
    stdout: str | None = None  # a shell hook run's last output, as text (the receiver keeps its tail)
    stderr: str | None = None
    # Who decided (middleware entries; all optional: older publishers send none of them)
    version: Text | None = None  # the module version the kernel called (its request subject's digest)
    rule: Text | None = None  # a declarative rule's condition (CEL)
    payload_sha256: Text | None = None  # SHA-256 of the stage payload the handler was sent (sorted-key JSON)
    changed: Text | None = None  # what a patch changed: top-level fields, ``~`` changed, ``+`` added, ``-`` removed
    fail_mode: Text | None = None  # ``closed`` or ``open``: the declared fail mode a fault was read by
    kernel: Text | None = None  # ``host:pid`` of the kernel that ran the chain
