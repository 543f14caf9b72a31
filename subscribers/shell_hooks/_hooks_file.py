"""hooks.json on disk: load it, watch it for changes, replace it atomically.

Watching polls a digest of the file's content through
:class:`bus._runtime.filewatch.FileVersion`, the poller every config file uses (as
PRX compares a content hash): editors that rename a new file over the old one
and rewrites in place that keep the size and the mtime are both seen, and the
version parsed is the one compared.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bus._runtime.filewatch import FileVersion, Poller
from bus._runtime.private_files import FILE_MODE
from subscribers.shell_hooks._errors import HookConfigError
from subscribers.shell_hooks._hook_metrics import CONFIG_ERRORS
from subscribers.shell_hooks._hooks_config import HooksConfig, parse_config
from subscribers.shell_hooks._limits import DEFAULT_POLL_INTERVAL

log = logging.getLogger("hookbus.hooks")

HOOKS_FILE: Final = "hooks.json"


def load(path: Path, data: bytes | None = None) -> HooksConfig:
    """Validate hooks.json (``data``, its content if already read); a missing file is an empty configuration."""
    if data is None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return HooksConfig()
        except OSError as exc:
            raise HookConfigError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    return parse_config(data, str(path))


def write_atomic(path: Path, config: HooksConfig) -> None:
    """Replace hooks.json with ``config``: temp file in the same directory, fsync, rename."""
    data = config.to_json_bytes()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)  # hooks may carry secrets (environment values): owner-only, whatever was there
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class HooksFile:
    """The workspace's hooks.json as a live configuration: the last good version, kept current.

    ``on_change(config)`` is called with every new valid configuration. A
    broken version is logged once (file, entry, field) and the last good one
    stays in force.
    """

    def __init__(
        self,
        path: Path,
        on_change: Callable[[HooksConfig], None],
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        self.path = path
        self.config = HooksConfig()
        self.last_error: HookConfigError | None = None
        self._on_change = on_change
        self._version = FileVersion(path)
        self._poller = Poller(self.check, poll_interval, str(path), log)

    def check(self) -> bool:
        """Reload if the file changed since the last look; True if a new configuration took effect."""
        if not self._version.changed():
            return False
        try:
            config = load(self.path, self._version.data)
        except HookConfigError as exc:
            self.last_error = exc
            CONFIG_ERRORS.inc()
            log.error("%s; keeping the last good configuration (%d hooks)", exc, len(self.config.entries))
            return False
        self.last_error = None
        self.config = config
        _log_notices(config)
        self._on_change(config)
        return True

    def start(self) -> None:
        """Load now, then keep watching in the background."""
        self.check()
        self._poller.start()

    async def stop(self) -> None:
        await self._poller.stop()


def _log_notices(config: HooksConfig) -> None:
    for warning in config.warnings:
        log.warning("%s", warning)
    for entry in config.entries:
        if entry.refused is not None:
            log.error("hook %s (%s) refused, it will not run: %s", entry.id, entry.event, entry.refused)
        ignored = entry.action.ignored_env()
        if ignored:
            names = ", ".join(ignored)
            log.warning("hook %s (%s): env %s ignored (a hook's env may not set these)", entry.id, entry.event, names)
