"""Connecting to NATS: which servers, with what options, and the first-connect retry.

The first connect retries with tenacity, bounded in time, and gives up with a
ConnectError naming the URL. Once connected the client reconnects for ever and
reports each disconnect and reconnect through the callbacks it is given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Final

import nats
import nats.errors
from nats.aio.client import Client
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from bus.errors import ConnectError

log = logging.getLogger("hookbus.connection")

URL_ENV: Final = "NATS_URL"
DEFAULT_URL: Final = "nats://127.0.0.1:4222"
#: Bytes a disconnected client buffers before emits are dropped and counted.
DEFAULT_PENDING_BYTES: Final = 8 * 1024 * 1024

Callback = Callable[[], Awaitable[None]]
ErrorCallback = Callable[[Exception], Awaitable[None]]


def resolve_servers(servers: str | list[str] | None) -> list[str]:
    """Explicit servers, else ``$NATS_URL`` (comma-separated), else 127.0.0.1:4222."""
    if servers is None:
        servers = os.environ.get(URL_ENV) or DEFAULT_URL
    if isinstance(servers, str):
        servers = [part.strip() for part in servers.split(",") if part.strip()]
    if not servers:
        raise ConnectError(["<none>"], ValueError("no NATS server URL given"))
    return list(servers)


def _transient(exc: BaseException) -> bool:
    """Network trouble is worth retrying; a refused credential or bad TLS setup is not."""
    if isinstance(exc, nats.errors.AuthorizationError | nats.errors.SecureConnRequiredError):
        return False
    return isinstance(exc, OSError | TimeoutError | nats.errors.NoServersError | nats.errors.Error)


async def open_connection(
    servers: list[str],
    *,
    name: str,
    connect_budget: float,
    on_error: ErrorCallback,
    on_disconnect: Callback,
    on_reconnect: Callback,
    options: dict[str, Any] | None = None,
) -> Client:
    """Connect, retrying transient failures for ``connect_budget`` seconds."""
    settings: dict[str, Any] = {
        "pending_size": DEFAULT_PENDING_BYTES,
        "connect_timeout": 2,
        "reconnect_time_wait": 0.5,
        "flush_timeout": 5.0,
        **(options or {}),
    }
    retrying = AsyncRetrying(
        stop=stop_after_delay(connect_budget),
        wait=wait_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_exception(_transient),
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                nc = await nats.connect(
                    servers,
                    name=name,
                    # One pass over the servers per attempt (each tried at most twice;
                    # 0 would mean "for ever" here), so that tenacity owns the retry
                    # policy; reconnecting for ever is switched on once connected.
                    allow_reconnect=False,
                    max_reconnect_attempts=1,
                    error_cb=on_error,
                    disconnected_cb=on_disconnect,
                    reconnected_cb=on_reconnect,
                    skip_subject_validation=True,  # bus.subjects validates first
                    **settings,
                )
    except Exception as exc:
        raise ConnectError(servers, exc) from exc
    # nats-py reads these options on every disconnect: from now on, reconnect for ever.
    nc.options["allow_reconnect"] = True
    nc.options["max_reconnect_attempts"] = -1
    return nc
