"""The one way to decode hookbus's wire messages and config files, and the field types they share.

Each message is a ``msgspec.Struct`` with its constraints, declared beside what
owns it (the envelope in :mod:`bus._core.envelope_schema`, the middleware
protocol in :mod:`bus._core.middleware_schema`, each feature in its package's
``schema.py``); :func:`decode` reads bytes as one of them and turns every
failure (not JSON, not an object, a field of the wrong type or out of range)
into the caller's hookbus error, naming the message and the field. Unknown
fields are ignored, so older and newer peers interoperate. docs/protocol.md
describes every message type (a test checks it).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, TypeVar

import msgspec

#: A NATS subject token (agent, module names).
Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+$")]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]

T = TypeVar("T")


#: A SHA-256 in lower-case hex.
Sha256Hex = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]

#: A string that is not empty.
Text = Annotated[str, msgspec.Meta(min_length=1)]

_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
#: Any message as JSON bytes (fields left unset are not written).
encode: Final = msgspec.json.Encoder().encode


def decode(
    data: bytes, kind: type[T], what: str, error: type[Exception], malformed: type[Exception] | None = None
) -> T:
    """``data`` as a ``kind``; raise ``error`` naming ``what`` and the field that is wrong.

    ``malformed``, if given, is raised instead when ``data`` is not a JSON object at all.
    """
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        result: T = decoder.decode(data)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if text.startswith("Expected `object`, got `") and " - at `" not in text:  # not an object at all
            raise (malformed or error)(f"{what} must be a JSON object, not {text.split('`')[3]}") from None
        raise error(f"{what}: {_field_message(text)}") from None
    except msgspec.DecodeError as exc:
        raise (malformed or error)(f"{what} is not JSON ({exc})") from None
    return result


def convert(obj: object, kind: type[T], where: str, error: type[Exception]) -> T:
    """A parsed document (YAML, JSON) as a ``kind``; raise ``error`` naming ``where`` and the field."""
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise error(f"{where}: {_field_message(str(exc))}") from None


_MISSING = re.compile(r"Object missing required field `([^`]*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")


def _message_and_path(text: str) -> tuple[str, str]:
    """msgspec's ``Expected `str`, got `int` - at `$.hooks[0].agent``` as its message and ``hooks[0].agent``."""
    message, _, where = text.partition(" - at `")
    if where.startswith("key` in `"):  # a mapping key of the wrong type
        message, where = f"a key: {message[:1].lower()}{message[1:]}", where[len("key` in `") :]
    return message, where.rstrip("`").removeprefix("$").lstrip(".")


def _field_message(text: str) -> str:
    """msgspec's ``Expected `str`, got `int` - at `$.agent``` as ``field 'agent': expected `str`, got `int```."""
    message, path = _message_and_path(text)
    prefix = f"{path}." if path else ""
    if missing := _MISSING.fullmatch(message):
        return f"field {prefix + missing.group(1)!r} is required"
    if unknown := _UNKNOWN.fullmatch(message):
        return f"unknown field {prefix + unknown.group(1)!r}"
    if not path:
        return message[:1].lower() + message[1:]
    return f"field {path!r}: {message[:1].lower()}{message[1:]}"


_TOP_FIELD = re.compile(r"[^.\[]+")


def field_problem(exc: msgspec.ValidationError) -> tuple[str | None, str]:
    """msgspec's complaint as (the top-level field it is about, or None; what is wrong), for errors
    that carry the field apart from the message (HookConfigError)."""
    message, path = _message_and_path(str(exc))
    if missing := _MISSING.fullmatch(message):
        return missing.group(1), "required field is missing"
    if unknown := _UNKNOWN.fullmatch(message):
        return unknown.group(1), "unknown field"
    name = _TOP_FIELD.match(path)
    detail = "" if name is None or name.group(0) == path else " (in a value)" if "[...]" in path else f" (at {path})"
    return (name.group(0) if name else None), message[:1].lower() + message[1:] + detail
