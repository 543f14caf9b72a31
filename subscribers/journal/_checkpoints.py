"""Signed checkpoints of the journal's chains, and the sink's Ed25519 key.

Every ``EVERY_ENTRIES`` entries of a kind, or ``EVERY_S`` seconds after the
last checkpoint when a kind has new entries, and when the sink stops, it signs
``{kind, chain, hash, time, sink, public_key}``: the chain's place and the
hash there. Someone who edits the files and recomputes every hash after
their edit still cannot make the signatures fit without the key. Checkpoints
go to the ``checkpoints`` table of ``journal.db`` and to
``journal/checkpoints.jsonl``.

The key is ``<workspace>/journal.key`` (the raw 32-byte Ed25519 seed,
base64, owner-only), made on first use; ``hookbus up`` prints its public key
so that it can be kept elsewhere and given to ``hookbus journal verify
--public-key``.
"""

from __future__ import annotations

import base64
import contextlib
import time
from pathlib import Path
from typing import Any, Final

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bus._core.clock import now_timestamp
from bus._runtime.private_files import private_dir, restrict, write_new_private
from subscribers.journal._chain import Chains, Link

KEY_NAME: Final = "journal.key"
EVERY_ENTRIES: Final = 1000
EVERY_S: Final = 10.0
#: A checkpoint's fields that its signature covers (all but the signature).
SIGNED: Final = ("kind", "chain", "hash", "time", "sink", "public_key")


class JournalKey:
    """The sink's signing key: loaded from the workspace, or made there (0600) the first time."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public_key = "ed25519:" + base64.b64encode(raw).decode()

    @classmethod
    def of_workspace(cls, workspace: Path) -> JournalKey:
        path = workspace / KEY_NAME
        private_dir(workspace)
        if not path.exists():
            seed = Ed25519PrivateKey.generate().private_bytes_raw()
            with contextlib.suppress(FileExistsError):  # another sink of this workspace made it meanwhile: use that
                write_new_private(path, base64.b64encode(seed) + b"\n")
        restrict(path)
        seed = base64.b64decode(path.read_bytes().strip())
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def sign(self, fields: dict[str, Any]) -> str:
        return base64.b64encode(self._private.sign(signed_bytes(fields))).decode()


def signed_bytes(checkpoint: dict[str, Any]) -> bytes:
    """What a checkpoint's signature covers: its signed fields as sorted-key JSON."""
    return orjson.dumps({name: checkpoint.get(name) for name in SIGNED}, option=orjson.OPT_SORT_KEYS)


def signature_holds(checkpoint: dict[str, Any], public_key: str) -> bool:
    """Whether ``checkpoint`` was signed by ``public_key`` (``ed25519:<base64>``) as it stands."""
    try:
        raw = base64.b64decode(public_key.removeprefix("ed25519:"), validate=True)
        signature = base64.b64decode(str(checkpoint.get("signature") or ""), validate=True)
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, signed_bytes(checkpoint))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


class Checkpointer:
    """Decides when each chain is due a checkpoint and makes it."""

    def __init__(
        self,
        key: JournalKey,
        sink: str,
        signed: dict[str, Link],
        every_entries: int = EVERY_ENTRIES,
        every_s: float = EVERY_S,
    ) -> None:
        self.key = key
        self.sink = sink
        self.every_entries = every_entries
        self.every_s = every_s
        self._signed = dict(signed)
        self._at: dict[str, float] = dict.fromkeys(signed, time.monotonic())

    def due(self, chains: Chains, final: bool = False) -> list[dict[str, Any]]:
        """Checkpoints for the chains that moved enough (or long enough ago; every moved one if ``final``)."""
        now = time.monotonic()
        made: list[dict[str, Any]] = []
        for kind, head in chains.heads.items():
            last = self._signed.get(kind, Link())
            if head.place <= last.place:
                continue
            moved = head.place - last.place
            if not final and moved < self.every_entries and now - self._at.setdefault(kind, now) < self.every_s:
                continue
            fields: dict[str, Any] = {
                "kind": kind,
                "chain": head.place,
                "hash": head.hash,
                "time": now_timestamp(),
                "sink": self.sink,
                "public_key": self.key.public_key,
            }
            fields["signature"] = self.key.sign(fields)
            made.append(fields)
            self._signed[kind] = head
            self._at[kind] = now
        return made


def last_signed(checkpoints: list[dict[str, Any]]) -> dict[str, Link]:
    """The last checkpoint of each kind, as the link it signed."""
    return {cp["kind"]: Link(int(cp["chain"]), str(cp["hash"])) for cp in checkpoints}
