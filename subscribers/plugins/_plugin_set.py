"""The plugins of a workspace, kept current: every folder of ``<workspace>/plugins`` with a plugin.toml.

A poll compares each folder's manifest and module by content digest
(:func:`bus._runtime.filewatch.read_version`, the one config-file reader). A
changed plugin is loaded and compiled again; if that fails, the error is
logged once and the last good version keeps running. A folder that is gone
takes its plugin with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bus._runtime.filewatch import Poller, Signature, read_version
from subscribers.plugins._errors import PluginError
from subscribers.plugins._manifest import MANIFEST_FILE, Manifest, load_manifest

if TYPE_CHECKING:
    from subscribers.plugins._host import PluginCode

log = logging.getLogger("hookbus.plugins")


@dataclass
class PluginState:
    """One plugin folder: the code running (the last good version, if any) and why the newest was refused."""

    name: str
    code: PluginCode | None = None
    error: str | None = None
    seen: tuple[Signature, Signature] | None = None

    @property
    def manifest(self) -> Manifest | None:
        return self.code.manifest if self.code is not None else None


def compile_plugin(manifest: Manifest) -> PluginCode:
    """The plugin's module compiled; wasmtime (the ``wasm`` extra) is loaded only now, when a plugin exists."""
    try:
        from subscribers.plugins._host import load_code
    except ImportError as exc:
        raise PluginError(manifest.name, f"wasmtime is not installed (pip install 'hookbus[wasm]'): {exc}") from None
    return load_code(manifest)


class PluginSet:
    """The plugins under one directory; ``on_change()`` is called after a poll that changed what runs."""

    def __init__(self, root: Path, on_change: Callable[[], None] | None = None, poll_interval: float = 0.5) -> None:
        self.root = root
        self.plugins: dict[str, PluginState] = {}
        self._on_change = on_change
        self._poller = Poller(self.check, poll_interval, f"the plugins of {root}", log)

    def running(self) -> dict[str, PluginCode]:
        """The plugins that run now, by name."""
        return {name: state.code for name, state in sorted(self.plugins.items()) if state.code is not None}

    def check(self) -> bool:
        """Look at the folders now; True if a plugin was added, replaced or removed."""
        folders = self._folders()
        changed = False
        for name in sorted(set(self.plugins) - set(folders)):
            changed |= self.plugins.pop(name).code is not None
            log.info("plugin %s removed", name)
        for name, folder in folders.items():
            changed |= self._check_one(self.plugins.setdefault(name, PluginState(name)), folder)
        if changed and self._on_change is not None:
            self._on_change()
        return changed

    def _folders(self) -> dict[str, Path]:
        try:
            entries = sorted(self.root.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {path.name: path for path in entries if path.is_dir() and (path / MANIFEST_FILE).is_file()}

    def _check_one(self, state: PluginState, folder: Path) -> bool:
        manifest_sig, _ = read_version(folder / MANIFEST_FILE)
        try:
            manifest = load_manifest(folder)
            wasm_sig, _ = read_version(manifest.wasm)
        except PluginError as exc:
            return self._refuse(state, (manifest_sig, None), exc)
        seen = (manifest_sig, wasm_sig)
        if seen == state.seen:
            return False
        try:
            code = compile_plugin(manifest)
        except PluginError as exc:
            return self._refuse(state, seen, exc)
        replaced = state.code is not None
        state.code, state.error, state.seen = code, None, seen
        log.info(
            "plugin %s %s %s (%s) on %s",
            state.name,
            manifest.version,
            "reloaded" if replaced else "loaded",
            code.kind,
            ", ".join(manifest.patterns) or "no events",
        )
        return True

    def _refuse(self, state: PluginState, seen: tuple[Signature, Signature], exc: PluginError) -> bool:
        if seen != state.seen:
            state.seen, state.error = seen, exc.reason
            kept = "keeping the last good version" if state.code is not None else "it does not run"
            log.error("%s; %s", exc, kept)
        return False

    def start(self) -> None:
        """Load now, then keep watching in the background."""
        self.check()
        self._poller.start()

    async def stop(self) -> None:
        await self._poller.stop()
