"""``hookbus mcp install --write``: the entry merged into the client's config file, what is there kept.

JSON clients (Claude Code's ``.mcp.json``, Cursor's ``.cursor/mcp.json``) get
the entry under ``mcpServers``; Codex's ``config.toml`` gets a
``[mcp_servers.NAME]`` table appended, the rest of the file byte for byte as
it was. An entry of the same name is refused unless ``force`` (then it is
replaced). The file is written whole to a temporary file beside it and moved
over it, so a reader never sees half of it.
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import orjson

from bus._core.errors import ConfigError


def default_path(client: str) -> Path:
    """Where the client reads its servers: the project's file, Codex's home config."""
    if client == "codex":
        return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "config.toml"
    return Path(".cursor/mcp.json") if client == "cursor" else Path(".mcp.json")


def merge(client: str, path: Path, name: str, server: dict[str, Any], table: str, *, force: bool) -> None:
    """Put ``server`` (``table``: its TOML text, for Codex) into ``path`` as ``name``."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    merged = _toml(text, name, table, force) if client == "codex" else _json(path, text, name, server, force)
    _replace(path, merged)


def _clash(path: Path, name: str) -> ConfigError:
    return ConfigError(f"{path} already has an MCP server named {name!r}: --force replaces it")


def _json(path: Path, text: str, name: str, server: dict[str, Any], force: bool) -> str:
    try:
        config = orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON ({exc}): not rewritten") from exc
    servers = config.setdefault("mcpServers", {}) if isinstance(config, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: mcpServers is not an object: not rewritten")
    if name in servers and not force:
        raise _clash(path, name)
    servers[name] = server
    return orjson.dumps(config, option=orjson.OPT_INDENT_2).decode() + "\n"


def _toml(text: str, name: str, table: str, force: bool) -> str:
    try:
        servers = tomllib.loads(text).get("mcp_servers", {})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the Codex config is not TOML ({exc}): not rewritten") from exc
    if name in servers:
        if not force:
            raise ConfigError(f"the Codex config already has an MCP server named {name!r}: --force replaces it")
        text = _without_table(text, name)
        if name in tomllib.loads(text).get("mcp_servers", {}):
            raise ConfigError(f"the Codex config's {name!r} entry is not a [mcp_servers.{name}] table: edit it by hand")
    return (text.rstrip("\n") + "\n\n" if text.strip() else "") + table


def _without_table(text: str, name: str) -> str:
    """``text`` without the ``[mcp_servers.NAME]`` table and its sub-tables (its other lines kept)."""
    quoted = re.escape(orjson.dumps(name).decode())
    own = re.compile(rf"^\s*\[\s*mcp_servers\s*\.\s*(?:{re.escape(name)}|{quoted})\s*(?:\]|\.)")
    kept: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            inside = bool(own.match(line))
        if not inside:
            kept.append(line)
    return "".join(kept)


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
