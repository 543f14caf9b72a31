"""The streamable HTTP sides of the proxy: a server at a URL, and the proxy serving clients itself (``--listen``).

Serving, each MCP session (opened by an ``initialize`` POST) gets a proxy and
an upstream connection of its own, closed with the session. The route is the
agent's identity on the bus, so it is not open to whoever reaches the port:
every request must carry ``Authorization: Bearer <token>`` (compared in
constant time), the Host and Origin headers must name the listening address
(DNS rebinding), a request body is at most ``max_bytes``, and at most
``max_sessions`` sessions are open at once.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Final
from uuid import uuid4

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp.client.streamable_http import streamable_http_client
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import RequestBodyLimitMiddleware, TransportSecuritySettings
from mcp.shared._httpx_utils import create_mcp_http_client

from bus.adapters._mcp._proxy import McpProxy, Streams, run_with

log = logging.getLogger(__name__)

#: The path clients post to, as the SDK's own servers serve it.
MCP_PATH: Final = "/mcp"
#: Sessions open at once; a client past it gets 503.
DEFAULT_MAX_SESSIONS: Final = 32
#: Seconds a session may sit with no request before it (and its server connection) is closed.
SESSION_IDLE_S: Final = 1800.0

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


@contextlib.asynccontextmanager
async def server_at_url(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Streams]:
    """The MCP server at ``url``, over streamable HTTP."""
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
    ):
        yield Streams(read, write)


async def _status(send: Send, code: int, text: str) -> None:
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    if code == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ProxySessions:
    """An ASGI app serving MCP over streamable HTTP, one proxy and upstream per session."""

    def __init__(
        self,
        upstream: Callable[[], AbstractAsyncContextManager[Streams]],
        proxy: Callable[[str], McpProxy],
        token: str,
        hosts: list[str],
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        self.upstream = upstream
        self.proxy = proxy
        self._token = f"Bearer {token}".encode()
        self.security = TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=[f"http://{h}" for h in hosts])
        self.max_sessions = max_sessions
        self.sessions: dict[str, StreamableHTTPServerTransport] = {}
        self._tg: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                self._tg = None

    def _authorized(self, scope: dict[str, Any]) -> bool:
        given = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
        return hmac.compare_digest(given, self._token)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope.get("path", "").rstrip("/") != MCP_PATH:
            await _status(send, 404, "not found")
            return
        if not self._authorized(scope):
            await _status(send, 401, "a bearer token is required")
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        session = headers.get(MCP_SESSION_ID_HEADER)
        if session is not None:
            transport = self.sessions.get(session)
            if transport is None:
                await _status(send, 404, "session not found")
                return
            await transport.handle_request(scope, receive, send)
            if transport.is_terminated:
                self.sessions.pop(session, None)
            return
        if len(self.sessions) >= self.max_sessions:
            await _status(send, 503, f"{self.max_sessions} sessions are open")
            return
        await self._open(scope, receive, send)

    async def _open(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        session = uuid4().hex
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session, security_settings=self.security, idle_timeout=SESSION_IDLE_S
        )
        self.sessions[session] = transport
        assert self._tg is not None
        try:
            await self._tg.start(self._serve, session, transport)
        except Exception:
            self.sessions.pop(session, None)
            raise
        await transport.handle_request(scope, receive, send)

    async def _serve(
        self, session: str, transport: StreamableHTTPServerTransport, *, task_status: TaskStatus[None]
    ) -> None:
        try:
            async with transport.connect() as (read, write):
                task_status.started()
                with transport.idle_scope or anyio.CancelScope():
                    await run_with(self.proxy(session), Streams(read, write), self.upstream)
        except Exception:
            log.exception("hookbus mcp: session %s ended with an error", session)
        finally:
            self.sessions.pop(session, None)


def with_body_limit(app: ProxySessions, max_bytes: int) -> Any:
    """The app behind the SDK's request-body limit (413 past ``max_bytes``)."""
    return RequestBodyLimitMiddleware(app, max_bytes)  # type: ignore[arg-type]  # ASGI callables, typed loosely here


async def serve(app: ProxySessions, host: str, port: int, max_bytes: int) -> None:
    """Serve ``app`` on ``host:port`` until cancelled."""
    import uvicorn

    config = uvicorn.Config(with_body_limit(app, max_bytes), host=host, port=port, lifespan="off", log_level="warning")
    async with app.running():
        await uvicorn.Server(config).serve()
