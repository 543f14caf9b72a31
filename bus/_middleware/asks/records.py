"""What the asks bucket holds: a pending ask, its answer, and the keys they live under.

Every key is written once (:mod:`bus._transport.once`) and scoped by the NATS
user of the asking kernel, so the shipped permissions can let each agent read
only its own asks and let only operators write answers:

- ``ask.<user>.<id>``: the pending ask, written by the asking kernel;
- ``answer.<user>.<id>``: the answer, written by an operator (or ``hookbus up`` for one);
- ``done.<user>.<id>``: the asking kernel took the answer or the deadline (a later identical call asks anew).

An id is ``<fingerprint>-<n>``: the fingerprint hashes the user, session,
stage, handler and payload hash, so a kernel restarted while its call was held
finds the same ask again by asking the same question (``n`` counts the asks of
that question already done).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec
import orjson

#: The subject token of a kernel without a NATS user (a server without users).
NO_USER: Final = "anon"
#: Seconds a key outlives its deadline: a restarted kernel can still tell "expired" from "never asked".
GRACE_S: Final = 60.0
#: The answers an operator may give.
AnswerKind = Literal["allow", "deny", "edit"]
ANSWER_KINDS: Final = ("allow", "deny", "edit")


class AskMsg(msgspec.Struct, kw_only=True):
    """A pending ask, as the asking kernel writes it under ``ask.<user>.<id>``."""

    id: str
    user: str
    stage: str
    payload: dict[str, Any]
    payload_sha256: str
    handler: str
    identity: str | None = None
    reason: str
    agent: str | None = None
    session: str | None = None
    asked_at: float  # Unix time
    deadline: float  # Unix time
    on_timeout: Literal["continue", "cancel"]
    call_id: str = ""  # the intercept's id (journal entries share it)


class AnswerMsg(msgspec.Struct, kw_only=True):
    """An operator's answer, under ``answer.<user>.<id>``: bound to the payload hash it approves."""

    id: str
    kind: AnswerKind
    by: str
    payload_sha256: str
    answered_at: float
    reason: str | None = None  # a deny's
    payload: dict[str, Any] | None = None  # an edit's: the payload the rest of the chain runs on


def payload_sha256(payload: Mapping[str, Any]) -> str:
    """The SHA-256 of a payload's canonical JSON (sorted keys): what an answer names to approve exactly it, a
    shadow entry names the call by, and each journal entry's ``payload_sha256``.

    A payload orjson cannot encode (an integer over 64 bits, a key that is no text: what no honest agent
    sends) is hashed as the standard library's sorted JSON of it, or failing that its ``repr``: never raises.
    """
    try:
        data = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS, default=str)
    except TypeError:
        try:
            data = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            data = repr(payload).encode(errors="replace")
    return hashlib.sha256(data).hexdigest()


def fingerprint(user: str, session: str | None, stage: str, handler: str, sha: str) -> str:
    """16 hex digits naming one question: the same call of the same session asked by the same handler."""
    text = orjson.dumps([user, session, stage, handler, sha])
    return hashlib.sha256(text).hexdigest()[:16]


def ask_key(user: str, ask_id: str) -> str:
    return f"ask.{user}.{ask_id}"


def answer_key(user: str, ask_id: str) -> str:
    return f"answer.{user}.{ask_id}"


def done_key(user: str, ask_id: str) -> str:
    return f"done.{user}.{ask_id}"


def notify_subject(user: str, ask_id: str) -> str:
    """Where an answerer wakes the asking kernel: its own inbox (the answer itself is read from the bucket)."""
    return f"_INBOX.asks.{ask_id}" if user == NO_USER else f"_INBOX.{user}.asks.{ask_id}"


def encode_msg(msg: AskMsg | AnswerMsg) -> bytes:
    return msgspec.json.encode(msg)


def decode_ask(data: bytes) -> AskMsg | None:
    """An ask read from the bucket, None if it is not one (a hostile writer's garbage is skipped)."""
    try:
        return msgspec.json.decode(data, type=AskMsg)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def decode_answer(data: bytes) -> AnswerMsg | None:
    try:
        return msgspec.json.decode(data, type=AnswerMsg)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
