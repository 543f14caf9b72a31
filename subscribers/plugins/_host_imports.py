"""PRX's host interfaces for components (``prx:host/log``, ``config``, ``kv``, ``events`` @0.1.0), hookbus meanings.

- ``log``: a record on the ``hookbus.plugins`` logger, as ``plugin <name>: ...``
  (control characters made visible, cut at 4096 characters), kept in the
  call's :class:`CallLog` for the journal; at most ``MAX_LINES_PER_CALL`` per
  call, the rest only counted.
- ``config``: the manifest's ``[config]`` table.
- ``kv``: the plugin's own store (:class:`PluginServices`; the worker's is a
  JetStream KV bucket per plugin with a size cap), only with the ``kv``
  permission.
- ``events``: ``publish`` emits ``eva.plugin.<name>.<topic>`` on the bus at the
  depth of the event being handled + 1, with the ``events`` permission, at
  most 100 per call;
  ``subscribe`` is refused (a plugin's events are its manifest's patterns).

A host function never raises into the plugin: a refusal is the interface's
``Err`` (or an empty answer where the WIT has no error). Calls into the bus
wait at most until the call's deadline.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Protocol

import orjson
import wasmtime.component as wc

from subscribers.plugins._manifest import Manifest
from subscribers.plugins._plugin_log import CallLog

log = logging.getLogger("hookbus.plugins")

VERSION: Final = "0.1.0"
_LEVELS: Final = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
#: PRX's limit on one published payload, and hookbus's on how many events one call may publish.
MAX_PUBLISH_BYTES: Final = 64 * 1024
MAX_PUBLISHES_PER_CALL: Final = 100


class PluginServices(Protocol):
    """What kv and events do for one plugin; ``timeout`` is the time left in the call."""

    def kv_get(self, key: str, timeout: float) -> bytes | None: ...
    def kv_set(self, key: str, value: bytes, timeout: float) -> str | None: ...
    def kv_delete(self, key: str, timeout: float) -> bool | str: ...
    def kv_keys(self, prefix: str, timeout: float) -> list[str]: ...
    def publish(self, topic: str, payload: Any, depth: int, timeout: float) -> str | None: ...


class Caller(Protocol):
    """The plugin's code as the host functions see it."""

    services: PluginServices
    depth: int
    #: Counts the calls: a new value starts a new call's publish budget.
    calls: int
    #: The running call's log lines (a new one per call).
    logged: CallLog

    def time_left(self) -> float: ...


class LocalServices:
    """kv in memory and published events kept in a list: ``hookbus plugins test`` (no bus)."""

    def __init__(self) -> None:
        self.kv: dict[str, bytes] = {}
        self.published: list[tuple[str, Any]] = []

    def kv_get(self, key: str, timeout: float) -> bytes | None:
        return self.kv.get(key)

    def kv_set(self, key: str, value: bytes, timeout: float) -> str | None:
        self.kv[key] = value
        return None

    def kv_delete(self, key: str, timeout: float) -> bool | str:
        return self.kv.pop(key, None) is not None

    def kv_keys(self, prefix: str, timeout: float) -> list[str]:
        return sorted(key for key in self.kv if key.startswith(prefix))

    def publish(self, topic: str, payload: Any, depth: int, timeout: float) -> str | None:
        self.published.append((topic, payload))
        return None


def link(linker: wc.Linker, manifest: Manifest, code: Caller) -> None:
    """Define the four interfaces in ``linker``; ``code`` gives the services, the depth and the time left per call."""
    left = code.time_left

    def services() -> PluginServices:
        return code.services

    name = manifest.name
    root = linker.root()
    granted = manifest.interfaces
    with root.add_instance(f"prx:host/log@{VERSION}") as iface:

        def log_(_store: Any, level: str, message: str) -> None:
            line = code.logged.add(str(level), message)
            if line is not None:  # None: past the call's bound (counted; the worker says how many, once)
                log.log(_LEVELS[line[0]], "plugin %s: %s", name, line[1])

        iface.add_func("log", log_)
    config = dict(manifest.config)
    with root.add_instance(f"prx:host/config@{VERSION}") as iface:
        iface.add_func("get", lambda _store, key: config.get(key))
        iface.add_func("get-all", lambda _store: list(manifest.config))
    kv_ok = "kv" in granted
    refused = "the kv permission is not granted (plugin.toml [permissions])"
    with root.add_instance(f"prx:host/kv@{VERSION}") as iface:
        iface.add_func("get", lambda _s, key: services().kv_get(key, left()) if kv_ok else None)
        iface.add_func("set", lambda _s, key, value: services().kv_set(key, bytes(value), left()) if kv_ok else refused)
        iface.add_func("delete", lambda _s, key: services().kv_delete(key, left()) if kv_ok else refused)
        iface.add_func("list-keys", lambda _s, prefix: services().kv_keys(prefix, left()) if kv_ok else [])
    events_ok = "events" in granted
    budget = {"call": -1, "left": 0}

    def publish(_store: Any, topic: str, payload: str) -> str | None:
        if not events_ok:
            return "the events permission is not granted (plugin.toml [permissions])"
        if budget["call"] != code.calls:
            budget["call"], budget["left"] = code.calls, MAX_PUBLISHES_PER_CALL
        if budget["left"] <= 0:
            return f"at most {MAX_PUBLISHES_PER_CALL} events per call"
        budget["left"] -= 1
        if len(payload.encode()) > MAX_PUBLISH_BYTES:
            return f"the payload is over {MAX_PUBLISH_BYTES} bytes"
        try:
            body = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            return f"the payload is not JSON: {exc}"
        return services().publish(topic, body, code.depth, left())

    with root.add_instance(f"prx:host/events@{VERSION}") as iface:
        iface.add_func("publish", publish)
        iface.add_func("subscribe", lambda _s, _p: "subscribe is not offered: a plugin's events are its manifest's")
        iface.add_func("unsubscribe", lambda _s, _i: "subscribe is not offered")
