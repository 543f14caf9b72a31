#!/usr/bin/env python3
"""Regenerate tests/vectors/identity.json, identity_invalid.json and version.json from the Python implementation.

The vectors pin the handler identity hash of docs/protocol.md (declaration ->
canonical text -> SHA-256) so another language can check its implementation
against them. Run from the repository root: ``python3 scripts/identity_vectors.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.protocol_support import canonical, declaration_from_wire, identity, version  # noqa: E402

BASE = {"module": "guard", "name": "no_rm", "stage": "tool.call"}

#: (what the case shows, wire declaration fields on top of BASE)
VALID: list[tuple[str, dict[str, Any]]] = [
    ("only the required fields: every default", {}),
    (
        "every field, already canonical",
        {
            "fail_closed": True,
            "timeout": 2.5,
            "before": ["audit.log"],
            "after": ["guard.first"],
            "match": ["apply_patch", "write_file"],
            "code": "9c1f0e4b2a7d3c11",
        },
    ),
    ("timeout 1 (an integer) hashes as 1.0", {"timeout": 1}),
    ("timeout 1.0: the same identity as 1", {"timeout": 1.0}),
    ("timeout 45 is clamped to 30.0 before hashing", {"timeout": 45}),
    ("timeout just over 30 is clamped to 30.0", {"timeout": 30.000000000000004}),
    ("timeout 30 exactly", {"timeout": 30}),
    ("timeout 0.1: shortest round-trip digits", {"timeout": 0.1}),
    ("timeout 1/3: shortest round-trip digits", {"timeout": 1 / 3}),
    ("timeout 0.000015: plain decimal at or above 1e-5", {"timeout": 0.000015}),
    ("timeout 0.00001: plain decimal at 1e-5", {"timeout": 0.00001}),
    ("timeout 0.0000095: exponent form below 1e-5", {"timeout": 0.0000095}),
    ("timeout 0.000001: exponent form 1e-6", {"timeout": 0.000001}),
    ("timeout 1e-7: exponent form", {"timeout": 1e-7}),
    ("code missing: the empty string", {}),
    ("code null: hashed as null, not as the empty string", {"code": None}),
    ("code empty string: the same as missing", {"code": ""}),
    ("code is hashed as sent: not trimmed", {"code": " 9c1f "}),
    ("code with unicode, quotes, control characters: raw UTF-8, JSON escapes", {"code": 'λ\n"q"\\\t\x01\x7f\u2028😀'}),
    ("match as a string is split on |", {"match": "write_file|apply_patch"}),
    ("match as a list: the same identity as the string form", {"match": ["write_file", "apply_patch"]}),
    ("match string: parts trimmed, empty parts dropped, duplicates dropped", {"match": " shell | |shell|ls "}),
    ("match list items are not split on |", {"match": ["a|b"]}),
    ("match list items are trimmed; an empty item is kept as the empty name", {"match": ["a", "  "]}),
    ("match list duplicates (after trimming) dropped", {"match": ["b", " b", "a"]}),
    ("match empty string: every call", {"match": ""}),
    ("match empty list: every call", {"match": []}),
    ("match null: every call", {"match": None}),
    ("match sorted by code point (U+FF5A before U+1F600, unlike UTF-16 order)", {"match": ["😀", "ｚ", "é", "Z"]}),
    (
        "match trims exactly the Python whitespace set (U+00A0, U+2003, U+001F, U+0085) but not U+FEFF",
        {"match": ["\u00a0a\u2003", "\x1fb\x85", "\ufeffc"]},
    ),
    ("before as a bare string: qualified with the declaring module", {"before": "first"}),
    ("before as a string is not split", {"before": "audit.log"}),
    ("after: qualified, trimmed, deduplicated, sorted", {"after": [" zeta ", "audit.log", "guard.zeta", "alpha"]}),
    ("before/after null: none", {"before": None, "after": None}),
    ("fail_closed false", {"fail_closed": False}),
    ("fail_closed true", {"fail_closed": True}),
    ("fail_closed missing: false", {}),
    ("fields outside the declaration are ignored", {"host": "worker-3", "comment": "ignored"}),
    ("a dotted custom stage", {"stage": "custom.deploy"}),
    ("module and handler names with - and _", {"module": "a-b_c", "name": "X-1_y"}),
    ("priority 0 (the default) is left out: the identity of a declaration without it", {"priority": 0}),
    ("priority 5: an integer in the canonical text", {"priority": 5}),
    ("priority negative", {"priority": -3}),
    ("priority 5.0 (integral): the same identity as 5", {"priority": 5.0}),
    ("when empty or with empty fields is left out", {"when": {"agents": [], "users": None}}),
    ("when null is left out", {"when": None}),
    ("when.agents: one name", {"when": {"agents": ["eva"]}}),
    ("when.agents as a string: the same identity as a one-item list", {"when": {"agents": "eva"}}),
    (
        "when: globs kept as written, trimmed, deduplicated, sorted; empty fields dropped",
        {
            "when": {
                "agents": [" eva-* ", "bob", "eva-*"],
                "sessions": [],
                "templates": ["support?"],
                "users": ["u[12]"],
            }
        },
    ),
    ("priority and when together", {"priority": 10, "when": {"users": ["alice"]}}),
    ("inputs and outputs empty are left out", {"inputs": [], "outputs": None}),
    ("outputs: a bare port is <handler>.<port>; dotted keys kept; sorted", {"outputs": ["query", "retrieval.query"]}),
    ("outputs as one string", {"outputs": "intent.label"}),
    (
        "inputs: keys or objects, sorted by key, required false and default null filled in",
        {"inputs": ["lang.user", {"key": "retrieval.query", "required": True}, {"key": "tone", "default": "calm"}]},
    ),
    ("an input default may be a boolean", {"inputs": [{"key": "flag.on", "default": False}]}),
]

#: (what is wrong, wire declaration fields on top of BASE): a kernel rejects the whole announcement.
INVALID: list[tuple[str, dict[str, Any]]] = [
    ("timeout 0", {"timeout": 0}),
    ("timeout negative", {"timeout": -1}),
    ("timeout a boolean", {"timeout": True}),
    ("timeout a string", {"timeout": "2"}),
    ("timeout null", {"timeout": None}),
    ("match names nothing (a string of empty parts)", {"match": " | "}),
    ("a reference that is neither handler nor module.handler", {"before": ["a.b.c"]}),
    ("a reference with a character outside [A-Za-z0-9_-]", {"after": ["a,b"]}),
    ("an empty reference", {"after": [""]}),
    ("a module name with a dot", {"module": "a.b"}),
    ("a handler name with a space", {"name": "no rm"}),
    ("a non-ASCII handler name", {"name": "é"}),
    ("an empty stage token", {"stage": "tool..call"}),
    ("module missing", {"module": None}),
    ("fail_closed 1: not a boolean", {"fail_closed": 1}),
    ("fail_closed an empty list: not a boolean", {"fail_closed": []}),
    ('fail_closed the string "false": not a boolean', {"fail_closed": "false"}),
    ("fail_closed null: not a boolean", {"fail_closed": None}),
    ("a match list item that is not a string", {"match": ["shell", True]}),
    ("a reference that is not a string", {"after": [7]}),
    ("priority a fraction", {"priority": 1.5}),
    ("priority a boolean", {"priority": True}),
    ("priority a string", {"priority": "5"}),
    ("priority beyond the limit", {"priority": 1_000_001}),
    ("when a list, not a mapping", {"when": ["eva"]}),
    ("when with an unknown field", {"when": {"agent": ["eva"]}}),
    ("when.agents an object", {"when": {"agents": {"eva": True}}}),
    ("when.agents with a non-string item", {"when": {"agents": [7]}}),
    ("when.agents with an empty pattern", {"when": {"agents": ["eva", " "]}}),
    ("an output key with an empty token", {"outputs": ["retrieval..query"]}),
    ("inputs as a string, not a list", {"inputs": "retrieval.query"}),
    ("an input default that is a number", {"inputs": [{"key": "a.b", "default": 1}]}),
    ("an input with required a string", {"inputs": [{"key": "a.b", "required": "yes"}]}),
    ("an input with an unknown field", {"inputs": [{"key": "a.b", "optional": True}]}),
    ("one input declared twice", {"inputs": ["a.b", {"key": "a.b", "required": True}]}),
]


def _valid() -> list[dict[str, Any]]:
    out = []
    for what, fields in VALID:
        wire = {**BASE, **fields}
        out.append({"what": what, "declaration": wire, "canonical": canonical(wire), "identity": identity(wire)})
    return out


def _invalid() -> list[dict[str, Any]]:
    out = []
    for what, fields in INVALID:
        wire = {key: value for key, value in {**BASE, **fields}.items() if value is not None or key != "module"}
        try:
            declaration_from_wire(wire)
        except Exception as exc:  # the reference's own error: what the vector records as the reason
            out.append({"what": what, "declaration": wire, "error": type(exc).__name__})
            continue
        raise SystemExit(f"invalid vector {what!r} is accepted by the Python implementation")
    return out


def _versions() -> list[dict[str, Any]]:
    one = {**BASE, "fail_closed": True, "match": "shell"}
    two = {**BASE, "name": "audit", "stage": "tool.result"}
    cases: list[tuple[str, list[dict[str, Any]]]] = [
        ("one handler", [one]),
        ("two handlers: order does not matter", [two, one]),
        ("none", []),
    ]
    out = []
    for what, wires in cases:
        identities = sorted(identity(wire) for wire in wires)
        out.append({"what": what, "declarations": wires, "identities": identities, "version": version(wires)})
    return out


def main() -> None:
    folder = ROOT / "tests" / "vectors"
    folder.mkdir(exist_ok=True)
    for name, data in (("identity", _valid()), ("identity_invalid", _invalid()), ("version", _versions())):
        text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
        (folder / f"{name}.json").write_text(text, encoding="utf-8")
        print(f"tests/vectors/{name}.json: {len(data)} vectors")


if __name__ == "__main__":
    main()
