"""JSON type names as JSON names them: for messages about values that came as JSON."""

from __future__ import annotations

from typing import Final

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
