"""One-shot publishing over a plain socket: a process that sends a few events and exits.

``hookbus emit`` runs once per hook call, so what it imports is most of what
it costs. This module speaks the few lines of the NATS client protocol that a
publish needs (read ``INFO``; send ``CONNECT``, the ``PUB`` commands and a
``PING``; read up to the ``PONG``, which the server sends after it handled
everything before it) with :mod:`socket` alone: no nats-py, no asyncio.

The ``PONG`` is the proof of delivery to the server; a ``-ERR`` before it
(permissions, authorization) is an error naming what the server said.
What it does not speak (TLS, nkey or .creds signatures, a server whose
``max_payload`` is under the event limit) it declines by returning False
before anything is sent, and the caller uses the full client.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import orjson

from bus._core.errors import ConnectError, NoResponders, PublishDenied, RequestTimeout
from bus._transport.endpoints import INBOX_ROOT, TLS_ENV

#: URL schemes of plain TCP servers (a bare host:port is one); tls:// and ws:// go to the full client.
_PLAIN_SCHEMES: Final = ("nats",)
_NEEDS_SIGNING: Final = ("HOOKBUS_NATS_CREDS", "HOOKBUS_NATS_NKEY_SEED")
#: Seconds for the server to answer the PING once everything is sent (nats-py's flush timeout).
_REPLY_TIMEOUT: Final = 5.0
#: A first connect retries an unreachable server with these waits (as the full client); refused: at once.
_FIRST_WAIT: Final = 0.05
_MAX_WAIT: Final = 1.0
_MAX_LINE: Final = 64 * 1024


def supported(servers: Sequence[str], settings: Mapping[str, str]) -> bool:
    """Whether the one-shot path can reach these servers with these settings (else: the full client)."""
    if any(name in settings for name in (*_NEEDS_SIGNING, *TLS_ENV)):
        return False
    try:
        return all(_split(url)[0] in _PLAIN_SCHEMES for url in servers)
    except ValueError:  # a port that is not a number: the full client says what is wrong with the URL
        return False


def publish(
    servers: Sequence[str],
    messages: Sequence[tuple[str, bytes]],
    settings: Mapping[str, str],
    *,
    name: str,
    min_payload: int,
    connect_budget: float,
) -> bool:
    """Publish ``messages`` (subject, bytes) on one connection to the first server that answers.

    Returns False, having sent nothing, when the server wants what this module
    does not speak (TLS) or takes less than ``min_payload`` bytes per message.
    Raises ConnectError when no server answers within ``connect_budget``
    seconds or the server refuses the credentials, PublishDenied when it
    refuses a subject.
    """
    sock, lines, url, info = _connect(list(servers), connect_budget)
    with sock:
        if info.get("tls_required") or int(info.get("max_payload", 0)) < min_payload:
            return False
        sock.settimeout(_REPLY_TIMEOUT)
        try:
            sock.sendall(_commands(url, messages, settings, name))
            _await_pong(sock, lines, url)
        except TimeoutError:
            raise ConnectError([url], TimeoutError("no PONG from the server in time")) from None
        except OSError as exc:
            raise ConnectError([url], exc) from None
    return True


def request(
    servers: Sequence[str],
    subject: str,
    data: bytes,
    settings: Mapping[str, str],
    *,
    name: str,
    connect_budget: float,
    timeout: float,
) -> bytes | None:
    """Send one request and return the reply's bytes: the one-shot path of ``hookbus claude-hook``.

    Subscribes to one reply subject under the user's private inbox prefix,
    publishes the request and reads up to the reply. Returns None, having sent
    nothing, when the server wants TLS or takes less than ``data``. Raises
    ConnectError (no server, credentials refused), NoResponders (nobody
    serves ``subject``, told at once by the server), RequestTimeout (no reply
    within ``timeout`` seconds) and PublishDenied (the subject is not allowed).
    """
    sock, lines, url, info = _connect(list(servers), connect_budget)
    with sock:
        if info.get("tls_required") or int(info.get("max_payload", 0)) < len(data) or not info.get("headers", True):
            return None
        inbox = f"{_inbox_prefix(url, settings)}.{os.urandom(8).hex()}"
        commands = _commands(url, (), settings, name, requests=True)[: -len(b"PING\r\n")]
        commands += b"SUB %s 1\r\nPUB %s %s %d\r\n" % (inbox.encode(), subject.encode(), inbox.encode(), len(data))
        sock.settimeout(timeout)
        try:
            sock.sendall(commands + data + b"\r\nPING\r\n")
            return _await_reply(sock, lines, url, subject)
        except TimeoutError:
            raise RequestTimeout(f"no reply on {subject} within {timeout:g}s") from None
        except OSError as exc:
            raise ConnectError([url], exc) from None


def user_of(servers: Sequence[str], settings: Mapping[str, str]) -> str | None:
    """The user name this connection's inbox prefix carries (``_INBOX.<user>``), as the full client's journal
    origin: what the relay's request subject names (the permissions let each user ask only under its own)."""
    return _inbox_prefix(servers[0], settings).partition(".")[2] or None if servers else None


def _inbox_prefix(url: str, settings: Mapping[str, str]) -> str:
    """The private inbox prefix the full client uses (connection.with_private_inbox): ``_INBOX.<user>``."""
    explicit = settings.get("HOOKBUS_NATS_INBOX")
    if explicit:
        return explicit
    user = settings.get("HOOKBUS_NATS_USER") or _split(url)[3]
    return f"{INBOX_ROOT}.{user}" if user else INBOX_ROOT


def _await_reply(sock: socket.socket, lines: _Lines, url: str, subject: str) -> bytes:
    """Read until the reply (MSG or HMSG on sid 1): a 503 status is no responders; -ERR lines fail."""
    while True:
        line = lines.next()
        if line == b"PING":
            sock.sendall(b"PONG\r\n")
        elif line.startswith(b"-ERR"):
            text = line[4:].strip().strip(b"'").decode(errors="replace")
            if "permissions violation" in text.lower():
                raise PublishDenied(_quoted_subject(text), text)
            raise ConnectError([url], PermissionError(text))
        elif line.startswith(b"MSG "):
            return lines.read(int(line.split()[-1]))
        elif line.startswith(b"HMSG "):
            parts = line.split()
            head, total = int(parts[-2]), int(parts[-1])
            body = lines.read(total)
            status = body[:head].split(b"\r\n", 1)[0]
            if status.startswith(b"NATS/1.0 503"):
                raise NoResponders(f"nobody serves {subject}")
            return body[head:]


def _split(url: str) -> tuple[str, str, int, str | None, str | None]:
    """(scheme, host, port, user, password) of a server URL; a bare host:port is a nats:// one."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return parts.scheme, parts.hostname or "127.0.0.1", parts.port or 4222, user, password


def _connect(servers: list[str], budget: float) -> tuple[socket.socket, _Lines, str, dict[str, Any]]:
    """A socket to the first server that sends its INFO, trying them in order until ``budget`` runs out."""
    deadline = time.monotonic() + budget
    wait = _FIRST_WAIT
    while True:
        failure: OSError | None = None
        refused = 0
        for url in servers:
            _, host, port, _, _ = _split(url)
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline - time.monotonic())))
            except OSError as exc:
                failure = exc
                refused += isinstance(exc, ConnectionRefusedError)
                continue
            lines = _Lines(sock)
            try:
                return sock, lines, url, _read_info(lines)
            except (OSError, ValueError) as exc:
                sock.close()
                failure = exc if isinstance(exc, OSError) else ConnectionError(str(exc))
        # Every server refused (nobody listens): a fact, said at once, not after the whole budget.
        if refused == len(servers) or time.monotonic() + wait > deadline:
            cause = failure or OSError(errno.EHOSTUNREACH, "no server")
            raise ConnectError(servers, cause)
        time.sleep(wait)
        wait = min(wait * 2, _MAX_WAIT)


def _read_info(lines: _Lines) -> dict[str, Any]:
    line = lines.next()
    if not line.startswith(b"INFO "):
        raise ConnectionError(f"the server did not start with INFO: {line[:80]!r}")
    info = orjson.loads(line[5:])
    if not isinstance(info, dict):
        raise ConnectionError("the server's INFO is not a JSON object")
    return info


def _commands(
    url: str, messages: Sequence[tuple[str, bytes]], settings: Mapping[str, str], name: str, *, requests: bool = False
) -> bytes:
    """CONNECT with the credentials (as nats-py chooses them), the PUBs, and a PING.

    ``requests``: also ask for headers and no-responders statuses (a request is answered at once
    by a 503 when nobody serves its subject).
    """
    options: dict[str, Any] = {"verbose": False, "pedantic": False, "lang": "python3", "protocol": 1, "name": name}
    if requests:
        options["headers"], options["no_responders"] = True, True
    _, _, _, url_user, url_password = _split(url)
    user, password = settings.get("HOOKBUS_NATS_USER"), settings.get("HOOKBUS_NATS_PASSWORD")
    token = settings.get("HOOKBUS_NATS_TOKEN")
    if user is not None and password is not None:
        options["user"], options["pass"] = user, password
    elif token is not None:
        options["auth_token"] = token
    elif url_user is not None and url_password is None:
        options["auth_token"] = url_user
    elif url_user is not None:
        options["user"], options["pass"] = url_user, url_password
    parts = [b"CONNECT ", orjson.dumps(options), b"\r\n"]
    for subject, data in messages:
        parts += [b"PUB %s %d\r\n" % (subject.encode(), len(data)), data, b"\r\n"]
    parts.append(b"PING\r\n")
    return b"".join(parts)


def _await_pong(sock: socket.socket, lines: _Lines, url: str) -> None:
    """Read until PONG: answer the server's PINGs, collect its -ERRs, fail on the first that ends the session."""
    denied: list[bytes] = []
    while True:
        line = lines.next()
        if line == b"PONG":
            break
        if line == b"PING":
            sock.sendall(b"PONG\r\n")
        elif line.startswith(b"-ERR"):
            text = line[4:].strip().strip(b"'")
            if b"permissions violation" in text.lower():
                denied.append(text)
                continue
            raise ConnectError([url], PermissionError(text.decode(errors="replace")))
    if denied:
        detail = denied[0].decode(errors="replace")
        raise PublishDenied(_quoted_subject(detail), detail)


def _quoted_subject(detail: str) -> str:
    """The subject a permissions violation names (``... Publish to "x"``), or the whole text."""
    head, quote, rest = detail.partition('"')
    return rest.rstrip('"') if quote else head


class _Lines:
    """CRLF-terminated protocol lines from a socket (what a publish gets back is a few short lines)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def next(self) -> bytes:
        while b"\r\n" not in self._buffer:
            if len(self._buffer) > _MAX_LINE:
                raise ConnectionError("the server sent a line too long for the protocol")
            chunk = self._sock.recv(4096)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes and the CRLF after them (a message's payload)."""
        while len(self._buffer) < size + 2:
            chunk = self._sock.recv(max(4096, size + 2 - len(self._buffer)))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size + 2 :]
        return data
