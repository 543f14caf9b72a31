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

from nats.js import api
from nats.js import errors as js_errors

from bus.client import Bus
from bus.core.depth import handling
from bus.core.errors import HookbusError
from bus.core.subjects import validate_subject

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
        self._kv: Any = None

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=max(0.001, timeout_s))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def _bucket(self) -> Any:
        if self._kv is None:
            js = self.bus.nc.jetstream()
            name = bucket_name(self.plugin)
            try:
                self._kv = await js.key_value(name)
            except js_errors.BucketNotFoundError:
                stream = api.StreamConfig(
                    name=f"KV_{name}",
                    subjects=[f"$KV.{name}.>"],
                    allow_direct=True,
                    allow_rollup_hdrs=False,
                    deny_purge=True,
                    deny_delete=True,
                    discard=api.DiscardPolicy.NEW,
                    max_bytes=self.kv_bytes,
                    max_msgs_per_subject=1,
                    max_consumers=-1,
                    max_msgs=-1,
                )
                await js.add_stream(stream)
                self._kv = await js.key_value(name)
        return self._kv

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float, failed: T) -> T:
        try:
            return self._run(coro, timeout_s)
        except (concurrent.futures.TimeoutError, js_errors.Error, HookbusError, OSError, ValueError):
            return failed

    def kv_get(self, key: str, timeout_s: float) -> bytes | None:
        async def get() -> bytes | None:
            try:
                entry = await (await self._bucket()).get(_key(key))
            except js_errors.KeyNotFoundError:
                return None
            return bytes(entry.value) if entry.value else None

        return self._call(get(), timeout_s, None) if _key(key) else None

    def kv_set(self, key: str, value: bytes, timeout_s: float) -> str | None:
        if not _key(key):
            return f"invalid key {key[:40]!r} (letters, digits, - _ / = . and at most {MAX_KEY_CHARS} characters)"

        async def put() -> str | None:
            try:
                await (await self._bucket()).put(_key(key), value)
            except js_errors.APIError as exc:
                return f"kv: {exc.description or exc}"  # e.g. the bucket is at its size cap
            return None

        try:
            return self._run(put(), timeout_s)
        except concurrent.futures.TimeoutError:
            return "kv: no answer within the plugin's time limit"
        except (js_errors.Error, HookbusError, OSError) as exc:
            return f"kv: {exc}"

    def kv_delete(self, key: str, timeout_s: float) -> bool | str:
        async def delete() -> bool | str:
            bucket = await self._bucket()
            try:
                await bucket.get(_key(key))
            except js_errors.KeyNotFoundError:
                return False
            await bucket.delete(_key(key))
            return True

        return self._call(delete(), timeout_s, "kv: the delete failed") if _key(key) else False

    def kv_keys(self, prefix: str, timeout_s: float) -> list[str]:
        async def keys() -> list[str]:
            try:
                found = await (await self._bucket()).keys()
            except js_errors.NoKeysError:
                return []
            return sorted(key.replace("/", ":") for key in found if key.replace("/", ":").startswith(prefix))

        return self._call(keys(), timeout_s, [])

    def publish(self, topic: str, payload: Any, depth: int, timeout_s: float) -> str | None:
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
            return self._run(emit(), timeout_s)
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
