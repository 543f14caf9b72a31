"""A WASM plugin's manifest as types: its metadata, capabilities, permissions and resources."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from bus._runtime.config_types import Name, NonEmpty, TimeoutMs

#: A plugin call's time limit when its manifest gives none (PRX's default, as for a shell hook).
PLUGIN_TIMEOUT_MS = 30_000
#: The most memory a WASM plugin may have (PRX's default; a manifest may only lower it).
PLUGIN_MAX_MEMORY_MB = 64


class PluginMeta(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """plugin.toml's ``[plugin]`` table. ``wasm``: the module's file in the plugin's folder (default plugin.wasm).

    ``api_version``, ``author``, ``license`` and ``capability`` are PRX's (its
    Python PDK's manifests name the capability here: ``capability = "hook"``).
    """

    name: Name
    version: str = "0.0.0"
    description: str = ""
    wasm: NonEmpty | None = None
    api_version: str = "1"
    author: str | None = None
    license: str | None = None
    capability: NonEmpty | None = None


class PluginEventPattern(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """PRX's ``[[capabilities.events]]``: a pattern and what it is for."""

    pattern: NonEmpty
    description: str = ""


class PluginCapability(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One ``[[capabilities]]`` block: ``hook`` (``events``, or PRX's ``trigger``) or ``filesystem`` (a preopen).

    ``name``, ``description``, ``priority`` and ``schedule`` are PRX's (for its
    tools, middleware and cron capabilities).
    """

    type: NonEmpty
    events: list[NonEmpty | PluginEventPattern] | None = None
    trigger: NonEmpty | None = None  # PRX's Go PDK: one pattern
    path: NonEmpty | None = None  # host directory, relative to the plugin's folder or absolute
    guest: NonEmpty | None = None  # where the plugin sees it (default: /<last part of path>)
    writable: bool = False
    name: str | None = None
    description: str = ""
    priority: int | None = None
    schedule: str | None = None


class PluginPermissions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """PRX's ``[permissions]``: the host interfaces a plugin needs (``required``) or may use (``optional``)."""

    required: list[NonEmpty] = []
    optional: list[NonEmpty] = []
    http_allowlist: list[str] = []
    filesystem_allowlist: list[str] = []


class PluginResources(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """plugin.toml's ``[resources]``: memory (MiB, at most 64) and time per event (ms), by hookbus's or PRX's names.

    PRX's ``max_memory_mb`` and ``max_execution_time_ms`` are the same limits
    as ``memory_mb`` and ``timeout_ms``; ``max_fuel`` is wasmtime fuel per
    event; ``max_kv_storage_mb`` caps the plugin's KV bucket.
    """

    memory_mb: Annotated[int, msgspec.Meta(ge=1, le=PLUGIN_MAX_MEMORY_MB)] | None = None
    timeout_ms: TimeoutMs | None = None
    max_memory_mb: Annotated[int, msgspec.Meta(ge=1, le=PLUGIN_MAX_MEMORY_MB)] | None = None
    max_execution_time_ms: TimeoutMs | None = None
    max_fuel: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_kv_storage_mb: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 10
    max_http_requests_per_call: int | None = None
    pool_size: int | None = None


class PluginManifestFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """<workspace>/plugins/<name>/plugin.toml: PRX's manifest as PRX's source reads it, plus hookbus's names."""

    plugin: PluginMeta
    capabilities: list[PluginCapability] = []
    permissions: PluginPermissions = PluginPermissions()
    resources: PluginResources = PluginResources()
    config: dict[str, str] = {}
    http_allowlist: dict[str, Any] | list[str] | None = None  # PRX's Python PDK writes a top-level table
