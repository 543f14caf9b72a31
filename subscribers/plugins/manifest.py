"""plugin.toml: a WASM plugin's name, module, event patterns, grants and limits, checked on load.

The ``[[capabilities]]`` blocks of ``type = "hook"`` list event patterns as
PRX writes them (``tool_call``, ``prx.lifecycle.*``, ``*``); the plugin
receives the union. ``type = "filesystem"`` grants one directory (a WASI
preopen); nothing else is reachable. ``type = "network"`` is refused: the WASI
the host offers has no sockets, and a plugin asking for the network must not
load believing it has it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from bus.core.config_schema import PluginCapability, PluginManifestFile
from bus.core.errors import ConfigError, PluginError, SubjectError
from bus.core.schema import convert
from bus.core.subjects import normalise_pattern

MANIFEST_FILE: Final = "plugin.toml"
DEFAULT_WASM: Final = "plugin.wasm"
#: Where plugins live in a workspace: one folder each.
PLUGINS_DIR: Final = "plugins"


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
    for index, cap in enumerate(doc.capabilities):
        where = f"{path}: capabilities[{index}]"
        if cap.type == "hook":
            patterns.update(_patterns(name, cap, where))
        elif cap.type == "filesystem":
            preopens.append(_preopen(name, folder, cap, where))
        elif cap.type == "network":
            raise PluginError(name, f"{where}: network is not offered to WASM plugins on this host (no WASI sockets)")
        else:
            raise PluginError(name, f"{where}.type: {cap.type!r} is not one of hook, filesystem, network")
    wasm = _wasm_path(name, folder, doc.plugin.wasm)
    return Manifest(
        name=name,
        folder=folder,
        wasm=wasm,
        version=doc.plugin.version,
        description=doc.plugin.description,
        patterns=tuple(sorted(patterns)),
        preopens=tuple(preopens),
        memory_bytes=doc.resources.memory_mb * 1024 * 1024,
        timeout_ms=doc.resources.timeout_ms,
    )


def _patterns(name: str, cap: PluginCapability, where: str) -> list[str]:
    if not cap.events:
        raise PluginError(name, f"{where}.events: a hook capability lists at least one event pattern")
    found = []
    for index, pattern in enumerate(cap.events):
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
