"""Reading one JSON object off the wire, for the decoders of hookbus's own messages."""

from __future__ import annotations

from typing import Any

import orjson


def json_object(data: bytes, what: str, error: type[Exception]) -> dict[str, Any]:
    """``data`` as a JSON object; raise ``error`` naming ``what`` it should have been."""
    try:
        obj: Any = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise error(f"{what} is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise error(f"{what} must be a JSON object, not {type(obj).__name__}")
    return obj
