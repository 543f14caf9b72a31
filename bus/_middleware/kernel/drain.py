"""Output drain: a decision larger than a budget is stored whole; the payload keeps head, tail and where.

A chatty handler must not blow up the model's context, and nothing may be
lost: the whole text (or the whole patched payload) goes to a file under the
drain directory, and what travels on carries its head and tail around a
marker naming that file. Drained output may hold anything a handler saw, so
it stays in the workspace (``./.hookbus/drain`` unless told otherwise), never
in a directory shared with other users, in owner-only files.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from bus._core.clock import random_hex
from bus._core.truncation import largest_string
from bus._runtime.private_files import private_dir, write_new_private

#: Bytes a cancel reason or an encoded patch payload may take before it is drained.
DEFAULT_BUDGET: Final = 16 * 1024


#: Under the default workspace (``./.hookbus``, as the CLI commands use it).
DEFAULT_DIR: Final = Path(".hookbus") / "drain"


def _default_dir() -> Path:
    return DEFAULT_DIR.absolute()  # fixed when the Bus is made: a later chdir does not move it


@dataclass
class Drain:
    """Where drained output goes and how much passes undrained."""

    directory: Path = field(default_factory=_default_dir)
    budget: int = DEFAULT_BUDGET

    def text(self, text: str, label: str) -> str:
        """``text`` if within budget, else its head and tail around a marker naming the full copy."""
        data = text.encode()
        if len(data) <= self.budget:
            return text
        return self._cut(text, self._store(data, label, "txt"))

    def payload(self, payload: dict[str, Any], label: str) -> dict[str, Any]:
        """``payload`` if within budget, else a copy whose largest strings are cut (the whole stored)."""
        data = orjson.dumps(payload)
        if len(data) <= self.budget:
            return payload
        path = self._store(data, label, "json")
        out = copy.deepcopy(payload)
        while len(orjson.dumps(out)) > self.budget:
            found = largest_string(out)
            if found is None or len(found[2]) <= 4 * self._keep:  # only cut strings are left
                break
            container, key, text = found
            container[key] = self._cut(text, path)
        return out

    def _cut(self, text: str, path: Path) -> str:
        keep = self._keep
        marker = f"…[hookbus: {len(text) - 2 * keep} characters drained; whole output in {path}]…"
        return f"{text[:keep]}\n{marker}\n{text[-keep:]}"

    @property
    def _keep(self) -> int:
        return max(self.budget // 8, 64)

    def _store(self, data: bytes, label: str, suffix: str) -> Path:
        private_dir(self.directory)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)[:100]
        path = self.directory / f"{safe}-{random_hex(32)}.{suffix}"
        write_new_private(path, data)
        return path
