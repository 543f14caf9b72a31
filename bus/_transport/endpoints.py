"""Which NATS servers, and with which credentials: settings only, no client.

Kept apart from :mod:`bus._transport.connection` so that what needs only the
settings (``hookbus emit``'s one-shot publish, :mod:`bus._transport.oneshot`)
does not load nats-py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Final
from urllib.parse import urlsplit

from bus._core.errors import ConnectError

URL_ENV: Final = "NATS_URL"
DEFAULT_URL: Final = "nats://127.0.0.1:4222"
#: Reply subjects live under this prefix plus the NATS user's name (see connection.with_private_inbox).
INBOX_ROOT: Final = "_INBOX"

#: Environment variables for credentials and TLS, and the nats-py option each sets.
AUTH_ENV: Final = {
    "HOOKBUS_NATS_USER": "user",
    "HOOKBUS_NATS_PASSWORD": "password",
    "HOOKBUS_NATS_TOKEN": "token",
    "HOOKBUS_NATS_CREDS": "user_credentials",
    "HOOKBUS_NATS_NKEY_SEED": "nkeys_seed",
    "HOOKBUS_NATS_INBOX": "inbox_prefix",
}
TLS_ENV: Final = ("HOOKBUS_NATS_TLS_CA", "HOOKBUS_NATS_TLS_CERT", "HOOKBUS_NATS_TLS_KEY")


def publishing_user(servers: Sequence[str], settings: Mapping[str, str]) -> str | None:
    """The user of the inbox prefix a Bus would take from these settings (bus._transport.connection.with_private_inbox):
    what a one-shot publisher's events are vouched as (docs/protocol.md#publisher-identity)."""
    prefix = settings.get("HOOKBUS_NATS_INBOX")
    if prefix:
        return prefix.partition(".")[2] or None
    return settings.get("HOOKBUS_NATS_USER") or next((urlsplit(url).username for url in servers if "@" in url), None)


def resolve_servers(servers: str | list[str] | None) -> list[str]:
    """Explicit servers, else ``$NATS_URL`` (comma-separated), else 127.0.0.1:4222."""
    if servers is None:
        servers = os.environ.get(URL_ENV) or DEFAULT_URL
    if isinstance(servers, str):
        servers = [part.strip() for part in servers.split(",") if part.strip()]
    if not servers:
        raise ConnectError(["<none>"], ValueError("no NATS server URL given"))
    return list(servers)


@dataclass(frozen=True)
class Credentials:
    """Credentials and TLS files for a connection, given as arguments (the command line's flags).

    Each field left None falls back to its ``HOOKBUS_NATS_*`` variable (see
    :data:`AUTH_ENV`, :data:`TLS_ENV`); a field set wins over the variable.
    """

    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds: str | None = None
    nkey_seed: str | None = None
    inbox: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def overrides(self) -> dict[str, str | None]:
        """The fields by the name of the variable each one overrides."""
        return {_VARIABLE[field.name]: getattr(self, field.name) for field in fields(self)}


_VARIABLE: Final = {
    "user": "HOOKBUS_NATS_USER",
    "password": "HOOKBUS_NATS_PASSWORD",
    "token": "HOOKBUS_NATS_TOKEN",
    "creds": "HOOKBUS_NATS_CREDS",
    "nkey_seed": "HOOKBUS_NATS_NKEY_SEED",
    "inbox": "HOOKBUS_NATS_INBOX",
    "tls_ca": "HOOKBUS_NATS_TLS_CA",
    "tls_cert": "HOOKBUS_NATS_TLS_CERT",
    "tls_key": "HOOKBUS_NATS_TLS_KEY",
}


def credential_values(
    environ: Mapping[str, str] | None = None, overrides: Mapping[str, str | None] | None = None
) -> dict[str, str]:
    """The ``HOOKBUS_NATS_*`` settings in force, by variable name: flags (``overrides``) win over the environment."""
    source = {**(os.environ if environ is None else environ)}
    source.update({k: v for k, v in (overrides or {}).items() if v})
    return {name: source[name] for name in (*AUTH_ENV, *TLS_ENV) if source.get(name)}
