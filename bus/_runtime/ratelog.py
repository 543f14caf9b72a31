"""Logging that cannot flood: at most one line per interval per key, with a count."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    """Log a message at most once per ``interval`` seconds; say how many were skipped."""

    def __init__(self, logger: logging.Logger, interval: float = 1.0) -> None:
        self._logger = logger
        self._interval = interval
        self._last = -interval
        self._skipped = 0

    def warning(self, msg: str, *args: object, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now - self._last < self._interval:
            self._skipped += 1
            return
        if self._skipped:
            msg = f"{msg} (and {self._skipped} similar in the last {now - self._last:.1f}s)"
            self._skipped = 0
        self._last = now
        self._logger.warning(msg, *args, exc_info=exc_info)
