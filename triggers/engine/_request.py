"""Turn requests that fit: the agent's turn server refuses a request over the bus limit, so the engine never sends one.

A request that fits goes as it is. One that does not (a prompt rendered from a
whole payload, or an envelope that already uses the limit, as a claimed
event's preview does) has its prompt cut to three quarters of the limit and the strings of
its envelope's payload cut in proportion to fill the rest, the envelope flagged
``truncated``; a claimed event keeps its ``payload_ref``, so the agent can still
fetch the whole payload. An empty payload is the last resort.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import orjson

from bus._core.truncation import StringCutter
from bus._turns.server import TurnRequest

#: Attempts at cutting the envelope's strings before its payload is emptied (two suffice in practice).
_FIT_TRIES: Final = 8


def bounded(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` UTF-8 bytes, a marker naming how many were cut."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    kept = encoded[:limit].decode(errors="ignore")
    return f"{kept}…[{len(encoded) - len(kept.encode())} bytes cut]"


def fit_request(request: TurnRequest, limit: int) -> TurnRequest:
    """``request`` within ``limit`` encoded bytes (same id), cut as the module says when it is over."""
    size = len(request.encode())
    if size <= limit:
        return request
    prompt = bounded(request.prompt, limit * 3 // 4)
    if request.event is None:
        return dataclasses.replace(request, prompt=prompt)
    envelope: dict[str, Any] = {**request.event, "truncated": True}
    fitted = dataclasses.replace(request, prompt=prompt, event=envelope)
    cutter = StringCutter(orjson.loads(orjson.dumps(envelope.get("payload", {}))))
    size = len(fitted.encode())
    excess, last = size - limit, size
    for _ in range(_FIT_TRIES):
        if size <= limit:
            return fitted
        if not cutter.cut(excess):
            break
        envelope["payload"] = cutter.value
        size = len(fitted.encode())
        if size >= last:  # every string is as short as it may be
            break
        excess, last = excess + size - limit, size
    if size > limit:
        envelope["payload"] = {}
    return fitted
