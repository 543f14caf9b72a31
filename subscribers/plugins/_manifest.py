"""plugin.toml: a WASM plugin's name, module, event patterns, grants and limits, checked on load.

The manifest is PRX's (src/plugins/manifest.rs and its PDKs' examples) with
hookbus's own names beside. The ``[[capabilities]]`` blocks of ``type =
"hook"`` list event patterns as PRX writes them (``tool_call``,
``prx.lifecycle.*``, ``*``: strings, PRX's ``[[capabilities.events]]`` tables
with a ``pattern``, or its Go PDK's ``trigger``); the plugin receives the
union. PRX's Python PDK names no patterns (``capability = "hook"`` in
``[plugin]``; its decorator filters events inside the plugin): such a plugin
receives every event. ``type = "filesystem"`` grants one directory (a WASI
preopen); nothing else is reachable. ``type = "network"`` is refused: the WASI
the host offers has no sockets, and a plugin asking for the network must not
load believing it has it.

``[permissions]`` grant PRX's host interfaces: ``log`` and ``config`` always,
``kv`` and ``events`` when named (required or optional); a required interface
hookbus does not offer (``http-outbound``, ``memory``) refuses the plugin.
``[resources]`` map to the limits, ``[config]`` to ``prx:host/config``. What
has no meaning here (PRX's tool or cron capabilities, HTTP allowlists, pool
sizes) is named in :attr:`Manifest.ignored`, shown by ``hookbus plugins``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from bus._core.errors import ConfigError, SubjectError
from bus._core.schema import convert
from bus._core.subjects import normalise_pattern
from subscribers.plugins._config_schema import (
    PLUGIN_MAX_MEMORY_MB,
    PLUGIN_TIMEOUT_MS,
    PluginCapability,
    PluginEventPattern,
    PluginManifestFile,
)
from subscribers.plugins._errors import PluginError

MANIFEST_FILE: Final = "plugin.toml"
DEFAULT_WASM: Final = "plugin.wasm"
#: Where plugins live in a workspace: one folder each.
PLUGINS_DIR: Final = "plugins"
#: PRX's host interfaces hookbus links: always, and when the permissions name them.
ALWAYS_GRANTED: Final = frozenset({"log", "config"})
GRANTABLE: Final = frozenset({"kv", "events"})
#: PRX permissions that need nothing granted here (WASI gives clocks).
NOTHING_TO_GRANT: Final = frozenset({"clock"})
#: PRX's capability types that are not hooks: a plugin with them loads, they are not served.
PRX_OTHER_CAPABILITIES: Final = frozenset({"tool", "middleware", "cron", "provider", "storage"})


@dataclass(frozen=True)
class Preopen:
    """A directory granted to the plugin: the host path, the path the plugin sees, and whether it may write."""

    host: Path
    guest: str
    writable: bool


@dataclass(frozen=True)
class Manifest:
    """A plugin's checked manifest."""

    name: str
    folder: Path
    wasm: Path
    version: str
    description: str
    #: The NATS patterns of its hook capabilities (normalised, deduplicated, sorted): the union it receives.
    patterns: tuple[str, ...]
    preopens: tuple[Preopen, ...]
    memory_bytes: int
    timeout_ms: int
    #: wasmtime fuel per event (PRX's ``max_fuel``), None: no fuel metering.
    fuel: int | None = None
    #: The size cap of the plugin's KV bucket (PRX's ``max_kv_storage_mb``).
    kv_bytes: int = 10 * 1024 * 1024
    #: ``[config]``: what ``prx:host/config`` returns.
    config: tuple[tuple[str, str], ...] = ()
    #: PRX host interfaces the plugin may call (``log``, ``config``, and ``kv``/``events`` when permitted).
    interfaces: frozenset[str] = ALWAYS_GRANTED
    #: What the manifest says that has no effect here, one short phrase each.
    ignored: tuple[str, ...] = ()


def load_manifest(folder: Path) -> Manifest:
    """Read and check ``folder/plugin.toml``; raises PluginError naming the plugin, the block and the field."""
    name = folder.name
    path = folder / MANIFEST_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PluginError(name, f"no {MANIFEST_FILE} in {folder}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PluginError(name, f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PluginError(name, f"{path} is not valid TOML: {exc}") from None
    try:
        doc = convert(data, PluginManifestFile, str(path), ConfigError)
    except ConfigError as exc:
        raise PluginError(name, str(exc)) from None
    if doc.plugin.name != name:
        raise PluginError(name, f"{path}: plugin.name {doc.plugin.name!r} differs from its folder name {name!r}")
    patterns: set[str] = set()
    preopens: list[Preopen] = []
    ignored: list[str] = []
    hooks = 0
    for index, cap in enumerate(doc.capabilities):
        where = f"{path}: capabilities[{index}]"
        if cap.type == "hook":
            hooks += 1
            patterns.update(_patterns(name, cap, where))
            ignored.extend(f"capabilities[{index}].{field}" for field in _prx_only(cap))
        elif cap.type == "filesystem":
            preopens.append(_preopen(name, folder, cap, where))
        elif cap.type == "network":
            raise PluginError(name, f"{where}: network is not offered to WASM plugins on this host (no WASI sockets)")
        elif cap.type in PRX_OTHER_CAPABILITIES:
            ignored.append(f"capabilities[{index}] ({cap.type}: not a hook)")
        else:
            raise PluginError(name, f"{where}.type: {cap.type!r} is not one of hook, filesystem, network")
    capability = doc.plugin.capability
    if capability is not None and capability != "hook":
        ignored.append(f"plugin.capability {capability!r} (not a hook)")
    if hooks == 0 and capability == "hook":
        patterns.add(normalise_pattern("*"))  # PRX's Python PDK: the decorator's events are filtered in the plugin
    interfaces = set(ALWAYS_GRANTED)
    perms = doc.permissions
    for kind, wanted in (("required", perms.required), ("optional", perms.optional)):
        for interface in wanted:
            if interface in GRANTABLE:
                interfaces.add(interface)
            elif interface in ALWAYS_GRANTED | NOTHING_TO_GRANT:
                continue
            elif kind == "required":
                raise PluginError(name, f"{path}: permissions.required: {interface!r} is not offered on this host")
            else:
                ignored.append(f"permissions.optional {interface!r} (not offered)")
    if perms.http_allowlist or doc.http_allowlist:
        ignored.append("http_allowlist (no network)")
    if perms.filesystem_allowlist:
        ignored.append("permissions.filesystem_allowlist (grant directories with filesystem capabilities)")
    res = doc.resources
    ignored.extend(f"resources.{field}" for field in ("max_http_requests_per_call", "pool_size") if getattr(res, field))
    memory_mb = _one_of(name, path, "memory_mb", res.memory_mb, res.max_memory_mb, PLUGIN_MAX_MEMORY_MB)
    timeout_ms = _one_of(name, path, "timeout_ms", res.timeout_ms, res.max_execution_time_ms, PLUGIN_TIMEOUT_MS)
    wasm = _wasm_path(name, folder, doc.plugin.wasm)
    return Manifest(
        name=name,
        folder=folder,
        wasm=wasm,
        version=doc.plugin.version,
        description=doc.plugin.description,
        patterns=tuple(sorted(patterns)),
        preopens=tuple(preopens),
        memory_bytes=memory_mb * 1024 * 1024,
        timeout_ms=timeout_ms,
        fuel=res.max_fuel,
        kv_bytes=res.max_kv_storage_mb * 1024 * 1024,
        config=tuple(sorted(doc.config.items())),
        interfaces=frozenset(interfaces),
        ignored=tuple(ignored),
    )


def _one_of(name: str, path: Path, field: str, ours: int | None, prx: int | None, default: int) -> int:
    if ours is not None and prx is not None and ours != prx:
        raise PluginError(name, f"{path}: resources.{field} and its PRX name say different limits")
    return ours if ours is not None else prx if prx is not None else default


def _prx_only(cap: PluginCapability) -> list[str]:
    """A hook block's PRX fields that change nothing here (middleware priority, cron schedule)."""
    return [field for field in ("priority", "schedule") if getattr(cap, field) is not None]


def _patterns(name: str, cap: PluginCapability, where: str) -> list[str]:
    written = [e.pattern if isinstance(e, PluginEventPattern) else e for e in cap.events or ()]
    if cap.trigger is not None:
        written.append(cap.trigger)
    if not written:
        raise PluginError(name, f"{where}.events: a hook capability lists at least one event pattern")
    found = []
    for index, pattern in enumerate(written):
        try:
            found.append(normalise_pattern(pattern))
        except SubjectError as exc:
            raise PluginError(name, f"{where}.events[{index}]: {exc.reason}") from None
    return found


def _preopen(name: str, folder: Path, cap: PluginCapability, where: str) -> Preopen:
    if cap.path is None:
        raise PluginError(name, f"{where}.path: a filesystem capability names the directory it grants")
    host = (folder / cap.path).resolve()
    if not host.is_dir():
        raise PluginError(name, f"{where}.path: {host} is not a directory")
    guest = cap.guest or f"/{host.name}"
    if not PurePosixPath(guest).is_absolute() or ".." in PurePosixPath(guest).parts:
        raise PluginError(name, f"{where}.guest: {guest!r} must be an absolute path without '..'")
    return Preopen(host, guest, cap.writable)


def _wasm_path(name: str, folder: Path, wasm: str | None) -> Path:
    file = wasm or DEFAULT_WASM
    if "/" in file or file in (".", ".."):
        raise PluginError(name, f"plugin.wasm {file!r} must be a file name in the plugin's folder")
    return folder / file
