"""The protocol test vectors (tests/vectors/*.json) against the Python implementation.

The vectors are the data another language's module or kernel checks itself
against (examples/js runs them too); this proves they say what hookbus does:
identities, versions, and which announcements, replies and requests are valid.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from bus import DecisionError, HookbusError, Module
from bus._core.decisions import read_reply
from bus._core.middleware_schema import MiddlewareRequest
from bus._core.schema import decode
from bus._middleware.registry import parse_announcement
from tests.support.protocol_support import canonical, declaration_from_wire, identity, version

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def _load(name: str) -> list[dict[str, Any]]:
    data = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    assert isinstance(data, list) and data, f"{name}.json holds no vectors"
    return data


@pytest.mark.parametrize("vector", _load("identity"), ids=lambda v: v["what"])
def test_identity_vector(vector: dict[str, Any]) -> None:
    wire = vector["declaration"]
    assert canonical(wire) == vector["canonical"]
    assert identity(wire) == vector["identity"]
    assert hashlib.sha256(vector["canonical"].encode()).hexdigest() == vector["identity"]


@pytest.mark.parametrize("vector", _load("identity_invalid"), ids=lambda v: v["what"])
def test_invalid_declaration_vector(vector: dict[str, Any]) -> None:
    with pytest.raises((HookbusError, KeyError)) as caught:
        declaration_from_wire(vector["declaration"])
    assert type(caught.value).__name__ == vector["error"]


@pytest.mark.parametrize("vector", _load("version"), ids=lambda v: v["what"])
def test_version_vector(vector: dict[str, Any]) -> None:
    assert sorted(identity(wire) for wire in vector["declarations"]) == vector["identities"]
    assert version(vector["declarations"]) == vector["version"]


def test_identity_pairs_that_must_agree_do() -> None:
    """The vectors' point: forms that differ on the wire but not in meaning share an identity, the rest do not."""
    by_what = {vector["what"]: vector["identity"] for vector in _load("identity")}
    assert by_what["timeout 1 (an integer) hashes as 1.0"] == by_what["timeout 1.0: the same identity as 1"]
    as_list = by_what["match as a list: the same identity as the string form"]
    assert by_what["match as a string is split on |"] == as_list
    assert by_what["code missing: the empty string"] == by_what["code empty string: the same as missing"]
    assert by_what["code null: hashed as null, not as the empty string"] != by_what["code missing: the empty string"]
    clamped = by_what["timeout 4000 is clamped to 3600.0 before hashing"]
    assert clamped == by_what["timeout just over 3600 is clamped to 3600.0"]
    assert (
        by_what["timeout 45 is kept (the protocol bounds a timeout at 3600 s; a kernel's ceiling is its own)"]
        != (by_what["timeout 30 exactly"])
    )


def test_a_module_announces_declarations_that_hash_back_to_their_identity() -> None:
    """What the Python SDK puts on the wire re-normalises to the same identity (the kernel's reading)."""
    module = Module("guard")

    @module.stage("tool.call", fail_closed=True, timeout=45, match=" shell |ls", after="first", code="x")
    async def no_rm(stage: str, payload: dict[str, Any]) -> Any:
        raise NotImplementedError

    (decl,) = module.declarations
    wire = json.loads(json.dumps(decl.to_wire()))
    assert identity(wire) == decl.identity()
    assert wire["timeout"] == 45.0 and wire["match"] == ["ls", "shell"] and wire["after"] == ["guard.first"]


@pytest.mark.parametrize("vector", _load("announcements"), ids=lambda v: v["what"])
def test_announcement_vector(vector: dict[str, Any]) -> None:
    """What a kernel accepts from the registry (examples/js checks the same file)."""
    data = json.dumps(vector["announcement"]).encode()
    if vector["valid"]:
        assert parse_announcement(data, vector["key"]).key == vector["key"]
    else:
        with pytest.raises((ValueError, HookbusError)):
            parse_announcement(data, vector["key"])


@pytest.mark.parametrize("vector", _load("replies"), ids=lambda v: v["what"])
def test_reply_vector(vector: dict[str, Any]) -> None:
    """What a kernel reads as a module's decision, and what as an invalid reply (the whole request faulted)."""
    data = json.dumps(vector["reply"]).encode()
    if vector["decision"] is None:
        with pytest.raises(DecisionError) as caught:
            read_reply(data, "hookbus.mw.g.v")
        assert "hookbus.mw.g.v" in str(caught.value)
    else:
        assert read_reply(data, "hookbus.mw.g.v")[1].kind == vector["decision"]


@pytest.mark.parametrize("vector", _load("requests"), ids=lambda v: v["what"])
def test_request_vector(vector: dict[str, Any]) -> None:
    """What a module runs, and what it answers with ``{"error": "malformed request: ..."}``."""
    data = json.dumps(vector["request"]).encode()
    if vector["valid"]:
        assert decode(data, MiddlewareRequest, "request", ValueError).stage == vector["request"]["stage"]
    else:
        with pytest.raises(ValueError, match=r"^request"):
            decode(data, MiddlewareRequest, "request", ValueError)
