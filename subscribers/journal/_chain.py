"""The journal's hash chain: each stored entry names the hash of the one before it, per kind.

A sink keeps one chain per kind of entry (``middleware``, ``shell_hook``,
``subscriber``, ``trigger``): the same chain in ``journal.db`` and in the
kind's JSONL file, so either can be checked alone. An entry's place in its
chain is ``chain`` (1, 2, 3 ...), ``prev`` is the hash of the entry at the
place before (empty for the first) and ``hash`` the SHA-256 of the row as
``hookbus journal --json`` prints it, without ``seq`` (the database's own row
number) and ``hash`` itself, as sorted-key JSON. Editing any field, removing,
reordering or inserting a row breaks a link; :mod:`subscribers.journal._verify`
finds the first.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import orjson

from subscribers.journal._schema import stored_digest

#: The ``prev`` of a chain's first entry.
GENESIS: Final = ""
#: What a row's hash leaves out: the database's row number (not the sink's to keep) and the hash itself.
UNHASHED: Final = frozenset({"seq", "hash"})


def record_hash(record: dict[str, Any]) -> str:
    """The hash of a row in its JSON form (``hookbus journal --json``, a JSONL line)."""
    body = dict(record)  # a copy, then two pops: a third of the time of a filtering comprehension
    for name in UNHASHED:
        body.pop(name, None)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True, slots=True)
class Link:
    """Where a chain stands: its last place and that entry's hash."""

    place: int = 0
    hash: str = GENESIS


class Chains:
    """The sink's chains, one per kind: links each new row to the last one stored of its kind."""

    def __init__(self, heads: dict[str, Link] | None = None) -> None:
        self.heads: dict[str, Link] = dict(heads or {})

    def head(self, kind: str) -> Link:
        return self.heads.get(kind, Link())

    def snapshot(self) -> dict[str, Link]:
        return dict(self.heads)

    def restore(self, heads: dict[str, Link]) -> None:
        self.heads = dict(heads)


def linked(row: Any, head: Link, as_json: Any) -> tuple[Any, Link]:
    """``row`` (a ``Received``) with its chain fields after ``head``, and the chain's new head.

    ``as_json(row, place, prev)`` is the row's JSON form without ``seq`` and ``hash`` (``_store.hashed_json``),
    passed in so this module needs no store, its keys already in sorted order (the same bytes as
    ``OPT_SORT_KEYS``, without its sort). It is serialised once and hashed as those bytes; the row keeps them
    for its JSONL line, and ``prev`` and the hash as journal.db stores them (raw bytes).
    """
    place = head.place + 1
    data = orjson.dumps(as_json(row, place, head.hash))
    raw = hashlib.sha256(data).digest()
    digest = raw.hex()
    return row.with_link(place, head.hash, digest, data, (stored_digest(head.hash), raw)), Link(place, digest)


def link_all(rows: list[Any], chains: Chains, as_json: Any) -> list[Any]:
    """Each of ``rows`` (all new) linked in turn into its kind's chain, ``chains`` moved to the last.

    The same links as :func:`linked` row by row, in one loop: no call, lookup or ``Link`` per row but the head's.
    """
    heads = chains.heads
    tips: dict[str, tuple[int, str, Any]] = {}
    out: list[Any] = []
    dumps, sha256 = orjson.dumps, hashlib.sha256
    for row in rows:
        kind = row.entry.kind
        tip = tips.get(kind)
        if tip is None:
            head = heads.get(kind) or Link()
            tip = (head.place, head.hash, stored_digest(head.hash))
        place, prev = tip[0] + 1, tip[1]
        data = dumps(as_json(row, place, prev))
        raw = sha256(data).digest()
        digest = raw.hex()
        out.append(row.with_link(place, prev, digest, data, (tip[2], raw)))
        tips[kind] = (place, digest, raw)
    for kind, (place, digest, _) in tips.items():
        heads[kind] = Link(place, digest)
    return out
