"""The asks webhook: ``hookbus up`` POSTs each new ask, with its two signed links, to a URL of the operator's.

``<workspace>/asks.webhook`` (YAML or JSON)::

    url: https://hooks.slack.com/services/...   # where each new ask is POSTed
    format: slack                               # optional: a Slack message ({"text": ...}) instead of JSON
    base_url: https://bus.example.org           # optional: where the links point (default: the served API)

The plain format is ``{"ask": <as GET /api/asks lists it>, "allow": URL, "deny": URL}``.
Links are :mod:`subscribers.http_api._ask_links`: one-time, for that ask and
its payload hash only, until its deadline. A POST that fails is logged and
not retried (the ask is still answered from the CLI, console or API).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
import orjson

from bus._client import Bus
from bus._core.errors import ConfigError, HookbusError
from bus._middleware.asks.records import AskMsg
from bus._middleware.asks.store import AskStore, Pending
from bus._runtime.config_files import read_yaml
from subscribers.http_api._ask_links import link, load_key

log = logging.getLogger("hookbus.asks")

WEBHOOK_FILE: Final = "asks.webhook"
FORMATS: Final = ("json", "slack")
#: Seconds one POST may take.
POST_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Webhook:
    url: str
    format: str = "json"
    base_url: str | None = None

    @property
    def host(self) -> str:
        """Where it posts, without the path (a chat webhook's path is its secret)."""
        return urlsplit(self.url).netloc


def load_webhook(workspace: Path) -> Webhook | None:
    """The workspace's webhook, None without the file; ConfigError naming the file if it is not one."""
    path = workspace / WEBHOOK_FILE
    doc = read_yaml(path, missing_ok=True)
    if doc is None and not path.exists():
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str):
        raise ConfigError(f"{path}: give at least url: (where each new ask is POSTed)")
    unknown = set(doc) - {"url", "format", "base_url"}
    if unknown:
        raise ConfigError(f"{path}: unknown keys {', '.join(sorted(unknown))} (url, format, base_url)")
    url, fmt, base = doc["url"], doc.get("format") or "json", doc.get("base_url")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{path}: url {url!r} is not an http(s) URL")
    if fmt not in FORMATS:
        raise ConfigError(f"{path}: format {fmt!r} is not one of {', '.join(FORMATS)}")
    if base is not None and (not isinstance(base, str) or not base.startswith(("http://", "https://"))):
        raise ConfigError(f"{path}: base_url {base!r} is not an http(s) URL")
    return Webhook(url, fmt, base)


def message(webhook: Webhook, ask: AskMsg, allow: str, deny: str) -> dict[str, Any]:
    """What is POSTed for one ask."""
    if webhook.format == "slack":
        args = orjson.dumps(ask.payload).decode()
        if len(args) > 1500:
            args = args[:1500] + "…"
        text = (
            f"*hookbus ask* `{ask.id}`: {ask.handler} on {ask.stage} (agent {ask.agent or '-'})\n"
            f"{ask.reason}\n```{args}```\n<{allow}|Allow>  ·  <{deny}|Deny>"
        )
        return {"text": text}
    return {"ask": Pending(ask).to_json(), "allow": allow, "deny": deny}


async def post_asks(bus: Bus, workspace: Path, webhook: Webhook, served_url: str) -> None:
    """POST each new ask until cancelled."""
    key = load_key(workspace)
    base = webhook.base_url or served_url
    timeout = aiohttp.ClientTimeout(total=POST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async for kind, msg in AskStore(bus.port).watch():
            if kind != "ask" or not isinstance(msg, AskMsg):
                continue
            body = message(webhook, msg, link(key, base, msg, "allow"), link(key, base, msg, "deny"))
            try:
                async with session.post(webhook.url, data=orjson.dumps(body), headers=_JSON) as response:
                    if response.status >= 300:
                        log.warning("asks webhook to %s answered %s for ask %s", webhook.host, response.status, msg.id)
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("asks webhook to %s failed for ask %s: %s", webhook.host, msg.id, exc)


_JSON: Final = {"Content-Type": "application/json"}


@contextlib.asynccontextmanager
async def posting(bus: Bus, workspace: Path, served_url: str) -> AsyncIterator[Webhook | None]:
    """While the block runs, POST new asks to the workspace's webhook (if it has one); yields it."""
    webhook = load_webhook(workspace)
    if webhook is None:
        yield None
        return
    load_key(workspace)  # made now, with the other secrets, not on the first ask

    async def run() -> None:
        try:
            await post_asks(bus, workspace, webhook, served_url)
        except HookbusError as exc:
            log.error("asks webhook stopped: %s", exc)

    task = asyncio.create_task(run())
    try:
        yield webhook
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
