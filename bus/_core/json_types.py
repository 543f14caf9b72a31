"""JSON type names as JSON names them: for messages about values that came as JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

_NAMES: Final = {
    type(None): "null",
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def json_type(value: object) -> str:
    """``null``, ``boolean``, ``number``, ``string``, ``array`` or ``object`` (else the Python type's name)."""
    return _NAMES.get(type(value)) or type(value).__name__


def json_object(data: bytes | str, what: str, error: Callable[[str], Exception]) -> dict[str, Any]:
    """The JSON object ``data`` holds; otherwise ``error`` of a message naming ``what`` and what is wrong."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise error(f"{what} must be a JSON object, not {json_type(value)}")
    return value
