"""The asks routes of the HTTP API (same admin token): list the held calls, answer one.

::

    GET  /api/asks                          {"asks": [ask, ...]} pending, oldest first
    POST /api/asks/{id}/allow   {"sha256"?}              let the call pass
    POST /api/asks/{id}/deny    {"reason", "sha256"?}    cancel it with the reason
    POST /api/asks/{id}/edit    {"payload", "sha256"?}   let it pass with another payload

An ask is what ``hookbus asks --json`` prints (:meth:`Pending.to_json`): the
exact payload and its hash, the handler, its reason, ``left_s``. Every answer
goes through :meth:`AskStore.answer` (first answer wins, refusals journaled),
named ``console`` when the request says ``X-Hookbus-Actor: console``, else
``api``. A refused answer (no such ask, expired, another payload hash, already
answered) is 409; the bus refusing the write or unreachable, 502.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from aiohttp import web

from bus._core.errors import AskRefused, HookbusError
from bus._middleware.asks.records import ANSWER_KINDS
from bus._middleware.asks.store import AskStore
from subscribers.http_api._console_api import CONSOLE

#: The header the console sends (as for hook writes) so that its answers are named as its own.
ACTOR_HEADER: Final = "X-Hookbus-Actor"


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/asks", list_asks)
    app.router.add_post("/api/asks/{id}/{kind}", answer_ask)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def actor(request: web.Request) -> str:
    """Who an admin-token answer is named as: ``console`` (the page says so) or ``api``."""
    return "console" if request.headers.get(ACTOR_HEADER) == "console" else "api"


async def list_asks(request: web.Request) -> web.Response:
    store = AskStore(request.app[CONSOLE].bus.port)
    try:
        pending = await store.pending()
    except HookbusError as exc:
        return _json({"error": f"the asks bucket: {exc}"}, 502)
    return _json({"asks": [item.to_json() for item in pending]})


async def answer_ask(request: web.Request) -> web.Response:
    ask_id, kind = request.match_info["id"], request.match_info["kind"]
    if kind not in ANSWER_KINDS:
        return _json({"error": f"an answer is one of {', '.join(ANSWER_KINDS)}, not {kind!r}"}, 404)
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        return _json({"error": f"request body is not valid JSON ({exc})"}, 400)
    if not isinstance(body, dict):
        return _json({"error": "the body is a JSON object"}, 400)
    sha256, reason, payload = body.get("sha256"), body.get("reason"), body.get("payload")
    if sha256 is not None and not isinstance(sha256, str):
        return _json({"error": "sha256 is the payload hash you approve (a string)"}, 400)
    if kind == "deny" and (not isinstance(reason, str) or not reason.strip()):
        return _json({"error": 'a deny says why: {"reason": "..."}'}, 400)
    if kind == "edit" and not isinstance(payload, dict):
        return _json({"error": 'an edit gives the payload the call goes on with: {"payload": {...}}'}, 400)
    return await answer(request, ask_id, kind, actor(request), sha256, reason=reason, payload=payload)


async def answer(
    request: web.Request,
    ask_id: str,
    kind: str,
    by: str,
    sha256: str | None,
    *,
    reason: str | None = None,
    payload: dict[str, Any] | None = None,
) -> web.Response:
    """Answer through the store: 200 with what was answered, 409 refused, 502 the bus refused or is gone."""
    store = AskStore(request.app[CONSOLE].bus.port)
    try:
        ask, given = await store.answer(ask_id, kind, by, sha256, reason=reason, payload=payload)
    except AskRefused as exc:
        return _json({"error": str(exc), "refused": exc.reason}, 409)
    except HookbusError as exc:
        return _json({"error": f"{kind} {ask_id}: {exc}"}, 502)
    waited = round(given.answered_at - ask.asked_at, 1)
    return _json({"id": ask.id, "answer": given.kind, "by": given.by, "waited_s": waited})
