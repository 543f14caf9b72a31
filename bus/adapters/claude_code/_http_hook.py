"""``POST /hooks/claude-code``: Claude Code's ``http`` hook type answered by ``hookbus up``.

The body is the hook input Claude Code sends (the same JSON a command hook
reads on stdin); the answer is the hook output of :mod:`bus.adapters.claude_code._mapping`
(``{}`` when the call goes ahead), so a session pays one local HTTP round trip
per hook instead of a process start. The bearer token is the hooks API's. A
malformed input is a 400 naming the field; a bus that cannot decide is a 503
(Claude Code reads a non-2xx answer as a failed hook: with ``onFailure:
"block"`` on the hook, the call is refused).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import orjson
from aiohttp import web

from bus._core.errors import HookbusError
from bus.adapters._errors import AgentHookError
from bus.adapters.claude_code._mapping import answer, parse

if TYPE_CHECKING:
    from bus._client import Bus

log = logging.getLogger("hookbus.api")

PATH: Final = "/hooks/claude-code"
#: The largest hook input accepted (a tool's whole output may be in a PostToolUse input).
MAX_INPUT: Final = 16 * 1024 * 1024


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


async def _bounded_body(request: web.Request) -> bytes | None:
    """The request body, or None once it passes MAX_INPUT (read no further)."""
    if request.content_length is not None and request.content_length > MAX_INPUT:
        return None
    chunks, size = [], 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > MAX_INPUT:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def handler(bus: Bus) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The route's handler answering with ``bus``: one hook input in, its hook output out.

    The hooks API serves it (``subscribers/http_api/server.py``), behind its guard for hook tokens.
    """

    async def claude_code_hook(request: web.Request) -> web.Response:
        body = await _bounded_body(request)
        if body is None:
            return _json({"error": f"the hook input is over {MAX_INPUT} bytes"}, 413)
        try:
            hook = parse(body)
        except AgentHookError as exc:
            return _json({"error": str(exc)}, 400)
        try:
            done = await answer(bus, hook)
        except HookbusError as exc:
            log.warning("%s: no decision: %s", PATH, exc)
            return _json({"error": f"no decision: {exc}"}, 503)
        return _json(done.output or {})

    return claude_code_hook
