"""The W3C trace context an envelope or a middleware request may carry (docs/protocol.md).

``traceparent`` is ``00-<trace id>-<span id>-<flags>``. A received one that is
not valid W3C is ignored (the receiver's span starts a trace of its own), as
the W3C recommendation asks of a receiver; spans themselves are
:mod:`bus._runtime.tracing`'s.
"""

from __future__ import annotations

import re
from typing import Final

#: version 00, a trace id and a parent id in lower-case hex, and the flags (W3C Trace Context, level 1).
_TRACEPARENT: Final = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


def valid_traceparent(value: object) -> str | None:
    """``value`` if it is a usable W3C traceparent (version 00, ids not all zero), else None."""
    if not isinstance(value, str) or len(value) != 55:
        return None
    found = _TRACEPARENT.fullmatch(value)
    if found is None or found[1] == _ZERO_TRACE or found[2] == _ZERO_SPAN:
        return None
    return value
