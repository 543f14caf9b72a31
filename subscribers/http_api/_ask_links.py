"""Signed one-time links that answer one ask (allow or deny) without the admin token: approval from a phone.

::

    GET  /asks/link/{id}/{kind}?sha256=&until=&sig=   a confirm page naming the call (answers nothing)
    POST /asks/link/{id}/{kind}?sha256=&until=&sig=   answers it (a deny's form may give a reason)

``sig`` is an HMAC-SHA256, keyed by ``<workspace>/ask-link-key`` (random,
0600, made by ``hookbus up`` like ``api-token``), over the ask's id, its
payload hash, the answer kind and the deadline, so a link is good for that
ask, that exact payload and that answer only, and only until the deadline;
once, because the store keeps the first answer and refuses the rest. A GET
never answers: chat apps, mail scanners and phones fetch a link to preview
it, and such a fetch must not approve a call; the page's button POSTs. The
answer is named ``link``. Everything refused is 403 (a bad or altered link,
past its deadline) or 409 (the store refused: answered already, gone).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import html
import os
import secrets
import time
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

import orjson
from aiohttp import web

from bus._core.errors import AskRefused, ConfigError, HookbusError
from bus._middleware.asks.records import AskMsg
from bus._middleware.asks.store import AskStore
from subscribers.http_api._console_api import CONSOLE

#: The workspace file of the links' key.
KEY_FILE: Final = "ask-link-key"
#: Where the links are served: outside ``/api/`` (every ``/api/`` route takes the admin token).
PREFIX: Final = "/asks/link/"
#: The answers a link gives (an edit needs a payload: that is the console's or the CLI's).
LINK_KINDS: Final = ("allow", "deny")
#: Who a link's answer is journaled as.
ACTOR: Final = "link"
#: The confirm page may post to itself only, and load nothing.
POLICY: Final = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"


def load_key(workspace: Path) -> bytes:
    """The links' HMAC key, made (random, 0600) on first use."""
    path = workspace / KEY_FILE
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
    key = path.read_text().strip()
    if not key:
        raise ConfigError(f"{path} is empty: delete it to have a new key generated")
    return key.encode()


def _until(deadline: float) -> str:
    return f"{deadline:.3f}"


def signature(key: bytes, ask_id: str, sha256: str, kind: str, until: str) -> str:
    """The HMAC-SHA256 (hex) binding a link to one ask, one payload, one answer and one deadline."""
    message = orjson.dumps([ask_id, sha256, kind, until])
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def link(key: bytes, base_url: str, ask: AskMsg, kind: str) -> str:
    """The signed link that answers ``ask`` with ``kind`` (``allow`` or ``deny``)."""
    until = _until(ask.deadline)
    sig = signature(key, ask.id, ask.payload_sha256, kind, until)
    query = urlencode({"sha256": ask.payload_sha256, "until": until, "sig": sig})
    return f"{base_url.rstrip('/')}{PREFIX}{ask.id}/{kind}?{query}"


def is_link(path: str) -> bool:
    return path.startswith(PREFIX)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/asks/link/{id}/{kind}", confirm)
    app.router.add_post("/asks/link/{id}/{kind}", answer)


def _page(status: int, title: str, body: str) -> web.Response:
    text = f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
    text += f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    headers = {"Content-Security-Policy": POLICY, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
    return web.Response(text=text, status=status, content_type="text/html", headers=headers)


def _checked(request: web.Request) -> tuple[str, str, str] | web.Response:
    """(id, kind, sha256) of a link whose signature holds and whose deadline is ahead, else the refusal."""
    ask_id, kind = request.match_info["id"], request.match_info["kind"]
    sha, until, sig = (request.query.get(name, "") for name in ("sha256", "until", "sig"))
    if kind not in LINK_KINDS or not sha or not until or not sig:
        return _page(403, "Refused", "<p>This is not a whole answer link.</p>")
    key = load_key(request.app[CONSOLE].workspace)
    if not hmac.compare_digest(signature(key, ask_id, sha, kind, until), sig):
        return _page(403, "Refused", "<p>This link's signature does not hold: it was altered.</p>")
    try:
        deadline = float(until)
    except ValueError:
        return _page(403, "Refused", "<p>This link's deadline is not a time.</p>")
    if deadline <= time.time():
        return _page(403, "Refused", "<p>This link's deadline has passed: the call went on without you.</p>")
    return ask_id, kind, sha


async def confirm(request: web.Request) -> web.Response:
    """The page a link opens: what the call is, and the button that answers it (a GET answers nothing)."""
    checked = _checked(request)
    if isinstance(checked, web.Response):
        return checked
    ask_id, kind, sha = checked
    try:
        ask = await AskStore(request.app[CONSOLE].bus.port).find(ask_id)
    except HookbusError as exc:
        return _page(502, "Unavailable", f"<p>The asks bucket: {html.escape(str(exc))}</p>")
    if ask is None or ask.payload_sha256 != sha:
        return _page(409, "Refused", "<p>No such ask is held (answered and gone, or expired).</p>")
    payload = orjson.dumps(ask.payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    facts = "".join(
        f"<dt>{name}</dt><dd>{html.escape(str(value))}</dd>"
        for name, value in (
            ("handler", ask.handler),
            ("reason", ask.reason),
            ("stage", ask.stage),
            ("agent", ask.agent or "-"),
            ("session", ask.session or "-"),
            ("time left", f"{max(0.0, ask.deadline - time.time()):.0f} s (then {ask.on_timeout})"),
        )
    )
    reason = "<p><label>Reason <input name='reason' id='reason'></label></p>" if kind == "deny" else ""
    action = html.escape(request.path_qs, quote=True)
    form = f"<form method='post' action='{action}'>{reason}<button id='answer' type='submit'>{kind}</button></form>"
    body = f"<dl>{facts}</dl><pre id='payload'>{html.escape(payload)}</pre>{form}"
    return _page(200, f"{kind.capitalize()} ask {ask_id}?", body)


async def answer(request: web.Request) -> web.Response:
    checked = _checked(request)
    if isinstance(checked, web.Response):
        return checked
    ask_id, kind, sha = checked
    reason = None
    if kind == "deny":
        form = await request.post()
        given = form.get("reason")
        reason = given.strip() if isinstance(given, str) and given.strip() else "denied from a signed link"
    try:
        await AskStore(request.app[CONSOLE].bus.port).answer(ask_id, kind, ACTOR, sha, reason=reason)
    except AskRefused as exc:
        return _page(409, "Refused", f"<p>{html.escape(exc.reason)}</p>")
    except HookbusError as exc:
        return _page(502, "Unavailable", f"<p>{html.escape(str(exc))}</p>")
    done = "allowed" if kind == "allow" else "denied"
    return _page(200, f"Ask {ask_id} {done}", "<p id='done'>Answered: the call goes on with your answer.</p>")
