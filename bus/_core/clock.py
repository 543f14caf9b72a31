"""Time stamps and ids: the one place hookbus reads the clock for a stamp or makes an id.

Stamps are RFC 3339 UTC with milliseconds and ``Z`` (``2026-03-21T08:15:30.123Z``),
the envelope's ``timestamp`` format, used by the journal, turns and hooks.json too.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from datetime import UTC, datetime
from typing import Any


def format_timestamp(epoch_ms: int) -> str:
    """RFC 3339 UTC with milliseconds and ``Z``: ``2026-03-21T08:15:30.123Z``."""
    seconds, millis = divmod(epoch_ms, 1000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{millis:03d}Z"


def timestamp_ms(epoch_ms: int) -> str:
    """``format_timestamp`` for times that come in order, as entries do: the date part is formatted once a second."""
    seconds, millis = divmod(epoch_ms, 1000)
    if seconds != _second[0]:  # formatting the date and time costs more than a journal entry's rest
        _second[:] = [seconds, format_timestamp(seconds * 1000)[:-5]]
    return f"{_second[1]}.{millis:03d}Z"


_second: list[Any] = [-1, ""]


def now_timestamp() -> str:
    """The current time as a stamp."""
    return timestamp_ms(time.time_ns() // 1_000_000)


class IdSource:
    """Unique ids: a random per-source prefix plus a counter (cheap, and unique across processes)."""

    __slots__ = ("counter", "prefix", "prefix_bytes")

    def __init__(self) -> None:
        self.prefix = secrets.token_hex(6) + "-"
        #: The prefix as bytes and the counter, for encoders that write ids straight into bytes.
        self.prefix_bytes = self.prefix.encode()
        self.counter = itertools.count(1).__next__

    def __call__(self) -> str:
        return f"{self.prefix}{self.counter():x}"


class RandomTokens:
    """Unpredictable tokens (24 hex digits, 96 random bits each), cheap: the OS's random bytes 4 KiB at a time.

    For what another party must not guess (a request's reply token), where
    :class:`IdSource`'s counter would be guessable.
    """

    __slots__ = ("_at", "_pool")
    _SIZE = 12

    def __init__(self) -> None:
        self._pool = b""
        self._at = 0

    def __call__(self) -> str:
        at = self._at
        if at + self._SIZE > len(self._pool):
            self._pool, at = os.urandom(4096), 0
        self._at = at + self._SIZE
        return self._pool[at : at + self._SIZE].hex()


def random_hex(chars: int) -> str:
    """``chars`` random hex digits: instance ids, file names, session names of demos."""
    return secrets.token_hex((chars + 1) // 2)[:chars]
