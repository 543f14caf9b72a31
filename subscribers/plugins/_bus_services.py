"""kv and events for a worker's plugins: a JetStream KV bucket per plugin, and events on the bus.

The bucket is ``hookbus_plugin_<name>``: one value per key, at most the
manifest's ``max_kv_storage_mb`` in all (a put past it is the plugin's
``Err``), created with rollup headers refused and purges denied (no writer can
erase the bucket with one ``Nats-Rollup`` put). A plugin's events are
``eva.plugin.<name>.<topic>`` at the handled event's depth + 1. The calls come
from the plugin's thread and run on the worker's loop, each waiting at most
the time left in the plugin's call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

import orjson

from bus._client import Bus
from bus._core.depth import handling
from bus._core.errors import HookbusError
from bus._core.subjects import kv_key_subject, kv_stream, validate_subject
from bus._transport.kv import Bucket
from subscribers.plugins._subjects import JS_API_STREAM_CREATE, JS_API_STREAM_INFO

T = TypeVar("T")
BUCKET_PREFIX: Final = "hookbus_plugin_"
EVENT_PREFIX: Final = "eva.plugin"
MAX_KEY_CHARS: Final = 256


def bucket_name(plugin: str) -> str:
    return f"{BUCKET_PREFIX}{plugin}"


class BusServices:
    """The services of one plugin, on ``bus`` from the worker's ``loop``."""

    def __init__(self, bus: Bus, loop: asyncio.AbstractEventLoop, plugin: str, kv_bytes: int) -> None:
        self.bus = bus
        self.loop = loop
        self.plugin = plugin
        self.kv_bytes = kv_bytes
        self._kv: Bucket | None = None

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=max(0.001, timeout))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def _bucket(self) -> Bucket:
        """The plugin's bucket, its stream created first as this module wants it (the façade binds to it)."""
        if self._kv is None:
            name = bucket_name(self.plugin)
            await self._request(JS_API_STREAM_CREATE + kv_stream(name), self._stream_config(name))
            self._kv = await self.bus.port.open_bucket(name)
        return self._kv

    def _stream_config(self, name: str) -> dict[str, Any]:
        return {
            "name": kv_stream(name),
            "subjects": [f"{kv_key_subject(name)}>"],
            "retention": "limits",
            "storage": "file",
            "num_replicas": 1,
            "max_msgs_per_subject": 1,
            "max_bytes": self.kv_bytes,
            "max_msgs": -1,
            "max_consumers": -1,
            "discard": "new",
            "allow_direct": True,
            "allow_rollup_hdrs": False,
            "deny_purge": True,
            "deny_delete": True,
        }

    async def _request(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        """One JetStream API request; its answer (an ``error`` member when refused: an existing stream is fine)."""
        msg = await self.bus.port.nc.request(subject, orjson.dumps(body), timeout=5)
        answer: dict[str, Any] = orjson.loads(msg.data)
        return answer

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float, failed: T) -> T:
        try:
            return self._run(coro, timeout)
        except Exception:  # a host function answers, whatever the bus did (the plugin sees its empty answer)
            return failed

    def kv_get(self, key: str, timeout: float) -> bytes | None:
        async def get() -> bytes | None:
            entry = await (await self._bucket()).get(_key(key))
            return entry.value if entry is not None else None

        return self._call(get(), timeout, None) if _key(key) else None

    def kv_set(self, key: str, value: bytes, timeout: float) -> str | None:
        if not _key(key):
            return f"invalid key {key[:40]!r} (letters, digits, - _ / = . and at most {MAX_KEY_CHARS} characters)"

        async def put() -> str | None:
            await (await self._bucket()).put(_key(key), value)
            return None

        try:
            return self._run(put(), timeout)
        except concurrent.futures.TimeoutError:
            return "kv: no answer within the plugin's time limit"
        except Exception as exc:  # e.g. the bucket is at its size cap: the plugin's Err
            return f"kv: {exc}"

    def kv_delete(self, key: str, timeout: float) -> bool | str:
        async def delete() -> bool | str:
            bucket = await self._bucket()
            if await bucket.get(_key(key)) is None:
                return False
            await bucket.delete(_key(key))
            return True

        return self._call(delete(), timeout, "kv: the delete failed") if _key(key) else False

    def kv_keys(self, prefix: str, timeout: float) -> list[str]:
        async def keys() -> list[str]:
            name = bucket_name(self.plugin)
            bucket = await self._bucket()
            info = await self._request(JS_API_STREAM_INFO + kv_stream(name), {"subjects_filter": ">"})
            head = kv_key_subject(name)
            stored = [subject[len(head) :] for subject in (info.get("state", {}).get("subjects") or {})]
            present = [key for key in stored if await bucket.get(key) is not None]  # not deleted
            return sorted(key.replace("/", ":") for key in present if key.replace("/", ":").startswith(prefix))

        return self._call(keys(), timeout, [])

    def publish(self, topic: str, payload: Any, depth: int, timeout: float) -> str | None:
        subject = f"{EVENT_PREFIX}.{self.plugin}.{topic}"
        try:
            validate_subject(subject)
        except HookbusError as exc:
            return f"invalid topic {topic[:60]!r}: {exc}"
        body = payload if isinstance(payload, dict) else {"value": payload}

        async def emit() -> str | None:
            with handling(depth):
                sent = await self.bus.emit(subject, body)
            return None if sent else "not published (the recursion limit, or the bus is stopping)"

        try:
            return self._run(emit(), timeout)
        except concurrent.futures.TimeoutError:
            return "no answer within the plugin's time limit"
        except HookbusError as exc:
            return str(exc)


def _key(key: str) -> str:
    """A PRX key as a NATS KV key (``:`` is not allowed there: ``/``), or '' when it cannot be one."""
    mapped = key.replace(":", "/")
    if not mapped or len(mapped) > MAX_KEY_CHARS or mapped.startswith(".") or mapped.endswith("."):
        return ""
    if not all(c.isalnum() or c in "-_/=." for c in mapped):
        return ""
    return mapped
