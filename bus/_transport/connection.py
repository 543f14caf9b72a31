"""Connecting to NATS: which servers, with what options, and the first-connect retry.

The first connect retries with tenacity, bounded in time, and gives up with a
ConnectError naming the URL. Once connected the client reconnects for ever and
reports each disconnect and reconnect through the callbacks it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import nats
import nats.errors
from nats.aio.client import Client
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from bus._core.errors import ConfigError, ConnectError, SubjectError
from bus._core.subjects import is_reply_inbox, validate_subject
from bus._transport.endpoints import (
    AUTH_ENV,
    DEFAULT_URL,
    INBOX_ROOT,
    TLS_ENV,
    URL_ENV,
    Credentials,
    credential_values,
    resolve_servers,
)

__all__ = [  # the settings live in bus._transport.endpoints; importers of this module keep finding them here
    "AUTH_ENV",
    "DEFAULT_URL",
    "INBOX_ROOT",
    "TLS_ENV",
    "URL_ENV",
    "Credentials",
    "auth_options",
    "is_auth_failure",
    "jetstream_replicas",
    "open_connection",
    "resolve_servers",
    "tls_context",
    "with_private_inbox",
]

log = logging.getLogger("hookbus.connection")

#: Bytes a disconnected client buffers before emits are dropped and counted.
DEFAULT_PENDING_BYTES: Final = 8 * 1024 * 1024

Callback = Callable[[], Awaitable[None]]
ErrorCallback = Callable[[Exception], Awaitable[None]]


async def _attempt(servers: list[str], **options: Any) -> Client:
    """One connect attempt; a failed one is closed, so its socket does not leak."""
    nc = Client()
    try:
        await nc.connect(servers, **options)
    except BaseException:
        # Bounded: closing a client whose TLS upgrade failed can wait on a transport that never finishes.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), timeout=1.0)
        raise
    return nc


def is_auth_failure(exc: BaseException) -> bool:
    """Whether the server refused our credentials (retrying cannot help)."""
    if isinstance(exc, nats.errors.AuthorizationError):
        return True
    text = str(exc).lower()
    return "authorization violation" in text or "authentication" in text or "user authentication expired" in text


def _transient(exc: BaseException) -> bool:
    """Network trouble is worth retrying; a refused credential or bad TLS setup is not."""
    if is_auth_failure(exc) or isinstance(exc, nats.errors.SecureConnRequiredError | ssl.SSLError):
        return False
    return isinstance(exc, OSError | TimeoutError | nats.errors.NoServersError | nats.errors.Error)


def _is_refused(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED


def auth_options(
    environ: Mapping[str, str] | None = None, overrides: Mapping[str, str | None] | None = None
) -> dict[str, Any]:
    """nats-py options for credentials and TLS, from ``HOOKBUS_NATS_*`` variables and flags.

    ``overrides`` uses the environment variable names as keys (flags win over the
    environment). Files named must exist: a typo is a ConfigError, not a hang.
    """
    source = credential_values(environ, overrides)
    options: dict[str, Any] = {}
    for variable, option in AUTH_ENV.items():
        value = source.get(variable)
        if value:
            if option in ("user_credentials", "nkeys_seed") and not os.path.isfile(value):
                raise ConfigError(f"{variable}={value!r}: no such file")
            options[option] = value
    ca, cert, key = (source.get(name) for name in TLS_ENV)
    if ca or cert or key:
        options["tls"] = tls_context(ca, cert, key)
    return options


def with_private_inbox(servers: list[str], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the prefix of this connection's reply subjects set.

    Replies (to middleware requests, JetStream API calls, turn requests) arrive
    on ``_INBOX.<user>.<random>``: the shipped permissions let each user
    subscribe to its own ``_INBOX.<user>.>`` only, so nobody reads another's
    replies. The user is the ``user`` option or the one in the server URL; an
    explicit ``inbox_prefix`` (``$HOOKBUS_NATS_INBOX``) wins, for nkey, token
    and .creds users, whose name the client does not know. Without a user it
    is NATS's plain ``_INBOX``.
    """
    prefix = options.get("inbox_prefix")
    if prefix is None:
        user = options.get("user") or next((urlsplit(url).username for url in servers if "@" in url), None)
        prefix = f"{INBOX_ROOT}.{user}" if user else INBOX_ROOT
    try:
        validate_subject(prefix)
    except SubjectError as exc:
        raise ConfigError(
            f"inbox prefix {prefix!r} is not a valid subject ({exc.reason}): set HOOKBUS_NATS_INBOX or --nats-inbox"
        ) from None
    if not is_reply_inbox(f"{prefix}.reply"):  # modules and relays answer nothing else: every request would time out
        raise ConfigError(
            f"inbox prefix {prefix!r} is not under {INBOX_ROOT}: set HOOKBUS_NATS_INBOX to {INBOX_ROOT}.<name>"
        )
    return {**options, "inbox_prefix": prefix}


def tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    """A client TLS context: verify the server against ``ca`` (or the system store), optional client cert."""
    for name, path in (("CA", ca), ("certificate", cert), ("key", key)):
        if path and not os.path.isfile(path):
            raise ConfigError(f"TLS {name} file {path!r} does not exist")
    if bool(cert) != bool(key):
        raise ConfigError("a TLS client certificate needs its key, and a key its certificate")
    context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    # Strict X.509 checks on every Python, as 3.13's default context has them: a certificate that 3.13
    # would refuse is refused on 3.11 and 3.12 too, not only after an upgrade.
    context.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
    if cert and key:
        context.load_cert_chain(cert, key)
    return context


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
    failures: list[Exception] = []  # the last failure nats-py reported before its NoServersError

    def worth_retrying(exc: BaseException) -> bool:
        # Nobody listening (every server refused the connection) is a fact, not a delay: said at once,
        # never after the whole budget. Timeouts and resets are retried within it.
        return _transient(exc) and not (failures and _is_refused(failures[-1]))

    retrying = AsyncRetrying(
        stop=stop_after_delay(connect_budget),
        wait=wait_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_exception(worth_retrying),
        reraise=True,
    )
    reconnect_wait = settings.pop("reconnect_time_wait")

    async def on_connect_error(exc: Exception) -> None:
        failures[:] = [exc]
        await on_error(exc)

    try:
        async for attempt in retrying:
            with attempt:
                nc = await _attempt(
                    servers,
                    name=name,
                    # One pass over the servers per attempt (each tried at most twice, without
                    # waiting in between: 0 would mean "for ever" here), so that tenacity owns
                    # the retry policy; reconnecting for ever is switched on once connected.
                    allow_reconnect=False,
                    max_reconnect_attempts=1,
                    reconnect_time_wait=0,
                    error_cb=on_connect_error,
                    disconnected_cb=on_disconnect,
                    reconnected_cb=on_reconnect,
                    skip_subject_validation=True,  # bus._core.subjects validates first
                    **settings,
                )
    except Exception as exc:
        cause = failures[-1] if isinstance(exc, nats.errors.NoServersError) and failures else exc
        raise ConnectError(servers, cause) from exc
    # nats-py reads these options on every disconnect: from now on, reconnect for ever.
    nc.options["allow_reconnect"] = True
    nc.options["max_reconnect_attempts"] = -1
    nc.options["reconnect_time_wait"] = reconnect_wait
    return nc


def jetstream_replicas(nc: Client) -> int:
    """Replicas for state hookbus creates: 3 on a cluster of three or more nodes, else 1.

    The server's INFO names the cluster and the other nodes' client URLs.
    """
    info: dict[str, Any] = getattr(nc, "_server_info", {}) or {}
    nodes = 1 + len(info.get("connect_urls") or [])
    return 3 if info.get("cluster") and nodes >= 3 else 1
