"""``hookbus journal verify``: check the journal's chains and checkpoints offline, naming the first break.

The records come in storage order (``journal.db`` by row number, a JSONL
file by line), each in its JSON form. Per kind, each record's hash must match
its content (else it was **edited**), its place must be the next one and its
``prev`` the hash of the record before. A place taken twice, a ``prev`` that
is no record's hash, a place skipped, or a place that is ahead but whose
``prev`` names a record stored later tell an entry **inserted**, **removed**
or **reordered**. Then each checkpoint's signature must hold for the expected
public key and the chain must pass through the place and hash it signed: a
chain rewritten from some point on (every hash recomputed) or cut at its end
fails there. Entries after a kind's last checkpoint are reported as not yet
signed: the sink signs at most ``EVERY_S`` seconds late, and when it stops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from subscribers.journal._chain import GENESIS, record_hash
from subscribers.journal._checkpoints import signature_holds
from subscribers.journal._groups import group_of


@dataclass(slots=True)
class Finding:
    """The first break found in one chain: what happened (edited, removed, reordered, inserted ...) and where."""

    kind: str
    what: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.what} at {self.where}: {self.detail}"


@dataclass(slots=True)
class Report:
    """What verify found: the entries and checkpoints checked, the breaks, the unsigned tails."""

    entries: int = 0
    checkpoints: int = 0
    findings: list[Finding] = field(default_factory=list)
    unsigned: dict[str, int] = field(default_factory=dict)
    unchained: int = 0
    #: The sink groups whose consumer the checkpoints name: this journal is one share of a group's entries.
    groups: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


def where(record: dict[str, Any]) -> str:
    """A record named the way ``hookbus journal --json`` shows it: its row, its place, its entry id."""
    seq = record.get("seq")
    row = f"seq {seq}" if seq is not None else f"line {record.get('_line')}"
    return f"{row} (chain place {record.get('chain')}, id {record.get('id')})"


def verify(
    records: Iterable[dict[str, Any]],
    checkpoints: list[dict[str, Any]],
    public_key: str | None,
    from_start: bool = True,
) -> Report:
    """Check ``records`` (in storage order) and ``checkpoints`` against ``public_key``.

    ``from_start`` False (``--since``, a rotated JSONL file) takes each chain's
    first record as it comes: its place and ``prev`` are trusted, the rest is checked.
    """
    report = Report(groups=sorted({g for cp in checkpoints if (g := group_of(str(cp.get("sink", "")))) is not None}))
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        report.entries += 1
        if record.get("chain") is None and record.get("hash") is None and record.get("prev") is None:
            report.unchained += 1  # stored before the journal was chained (an older sink)
            if any(by_kind.values()):
                kind = str(record.get("kind"))
                report.findings.append(Finding(kind, "inserted", where(record), "a row without chain fields"))
            continue
        by_kind.setdefault(str(record.get("kind")), []).append(record)
    broken: set[str] = set()
    for kind, chain in by_kind.items():
        finding = _chain_break(kind, chain, from_start)
        if finding is not None:
            report.findings.append(finding)
            broken.add(kind)
    for kind, chain in by_kind.items():
        if kind in broken:  # the first break is named; the checkpoints after it cannot fit either
            continue
        _check_signed(kind, chain, [cp for cp in checkpoints if cp.get("kind") == kind], public_key, report)
    if from_start:
        for kind in sorted({str(cp.get("kind")) for cp in checkpoints} - set(by_kind)):
            report.findings.append(
                Finding(kind, "removed", "every entry", "checkpoints sign entries none of which is stored")
            )
    report.findings.sort(key=lambda f: f.kind)
    return report


def _chain_break(kind: str, chain: list[dict[str, Any]], from_start: bool) -> Finding | None:
    hashes = {record.get("hash") for record in chain}
    places = {record.get("chain") for record in chain}
    first = chain[0]
    expected = 1 if from_start else _place(first)
    prev = GENESIS if from_start else first.get("prev")
    holder: dict[int, dict[str, Any]] = {}
    for record in chain:
        place = _place(record)
        if record_hash(record) != record.get("hash"):
            return Finding(kind, "edited", where(record), "its content does not match its hash")
        if place == expected and record.get("prev") == prev:
            holder[place] = record
            expected, prev = place + 1, record.get("hash")
            continue
        earlier = holder.get(place)
        if earlier is not None:  # the place is taken twice: the one whose successor links elsewhere was inserted
            forged = earlier if earlier.get("prev") == record.get("prev") else record
            return Finding(kind, "inserted", where(forged), f"chain place {place} is taken twice")
        if record.get("prev") not in hashes and record.get("prev") != prev:
            if place > expected and expected not in places:
                gone = f"place {expected}" if place == expected + 1 else f"places {expected}..{place - 1}"
                return Finding(kind, "removed", f"before {where(record)}", f"chain {gone} missing")
            return Finding(kind, "inserted", where(record), "it follows no stored entry")
        return Finding(kind, "reordered", where(record), f"stored where chain place {expected} belongs")
    return None


def _check_signed(
    kind: str, chain: list[dict[str, Any]], checkpoints: list[dict[str, Any]], public_key: str | None, report: Report
) -> None:
    at = {_place(record): record for record in chain}
    low, high = _place(chain[0]), max(at)
    signed = 0
    for checkpoint in checkpoints:
        report.checkpoints += 1
        place = _place(checkpoint)
        label = f"checkpoint of chain place {place} ({checkpoint.get('time')})"
        key = public_key or str(checkpoint.get("public_key"))
        if public_key is not None and checkpoint.get("public_key") != public_key:
            report.findings.append(Finding(kind, "foreign checkpoint", label, "signed by another key"))
            return
        if not signature_holds(checkpoint, key):
            report.findings.append(Finding(kind, "forged checkpoint", label, "its signature does not hold"))
            return
        if place < low:
            continue  # before what is checked (--since, a rotated file)
        record = at.get(place)
        if record is None:
            what = "removed" if place > high else "rewritten"
            report.findings.append(Finding(kind, what, label, f"the signed chain place {place} is not stored"))
            return
        if record.get("hash") != checkpoint.get("hash"):
            detail = "its hash is not the signed one: the chain was recomputed up to here"
            report.findings.append(Finding(kind, "rewritten", where(record), detail))
            return
        signed = max(signed, place)
    if high > signed:
        report.unsigned[kind] = high - max(signed, low - 1)


def _place(record: dict[str, Any]) -> int:
    value = record.get("chain")
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
