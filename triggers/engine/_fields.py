"""Reading fields of an event by dotted path: ``payload.total``, ``session_id``, ``depth``."""

from __future__ import annotations

from typing import Any, Final

from bus._core.envelope import Event

MISSING: Final = object()
#: Envelope fields a path may start with; ``received_as`` is set by the receiver (``prx-envelope``,
#: ``prx-payload`` or missing), never taken from the sender.
_TOP: Final = ("subject", "event", "timestamp", "session_id", "id", "depth", "source", "received_as", "payload")


def valid_path(path: str) -> bool:
    head = path.split(".", 1)[0]
    return head in _TOP and all(path.split("."))


def lookup(event: Event, path: str) -> Any:
    """The value at ``path`` in the event, or MISSING."""
    head, _, rest = path.partition(".")
    value: Any = getattr(event, head, MISSING) if head in _TOP else MISSING
    if rest:
        for part in rest.split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return MISSING
    return value
