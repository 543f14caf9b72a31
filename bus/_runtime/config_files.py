"""Config files whose top level is one key holding a list of named entries (triggers.yaml, hook_turns.yaml).

One reader for their shared shape: the YAML is read, the key checked, each entry
parsed by the loader's own function (which names the entry in its errors), and
a name used twice refused. Every problem is a ConfigError naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from bus._core.errors import ConfigError

Entry = TypeVar("Entry")


def read_yaml(path: Path, *, missing_ok: bool) -> Any:
    """The parsed document, or None for a missing file when that is allowed."""
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        if missing_ok:
            return None
        raise ConfigError(f"{path}: no such file") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def parse_entries(
    doc: Any,
    where: str,
    key: str,
    noun: str,
    parse_one: Callable[[Any, str], Entry],
    name_of: Callable[[Entry], str],
    *,
    empty_ok: bool,
) -> list[Entry]:
    """The entries under ``key``, each parsed as ``<where>: <noun> #<n>``; a name defined twice is refused.

    With ``empty_ok`` an empty document or an empty key means no entries (a
    missing triggers.yaml is no triggers); without it the key must hold a list.
    """
    if empty_ok and (doc is None or doc == {}):
        return []
    shape = f"{where}: the top level must be a mapping with one key, {key!r}, holding a list"
    if not isinstance(doc, dict) or set(doc) != {key}:
        raise ConfigError(shape)
    items = doc[key]
    if items is None and empty_ok:
        items = []
    if not isinstance(items, list):
        raise ConfigError(shape)
    entries: list[Entry] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        entry = parse_one(item, f"{where}: {noun} #{index + 1}")
        name = name_of(entry)
        if name in seen:
            raise ConfigError(f"{where}: {noun} {name!r} is defined twice")
        seen.add(name)
        entries.append(entry)
    return entries
