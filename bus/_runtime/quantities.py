"""Durations and sizes as people type them on the command line: ``10m``, ``24h``, ``7d``; ``512MiB``, ``1GB``."""

from __future__ import annotations

import re
from typing import Final

from bus._core.errors import ConfigError

_DURATION_UNITS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_NUMBER_UNIT: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def parse_duration(text: str, what: str = "a duration") -> float:
    """Seconds in ``text``: a number with s, m, h or d (no unit: seconds); ConfigError naming ``what`` otherwise."""
    found = _NUMBER_UNIT.fullmatch(text)
    unit = found.group(2).lower() if found else None
    if found is None or unit not in _DURATION_UNITS:
        raise ConfigError(f"{what} {text!r} is not a duration such as 30s, 10m, 24h or 7d")
    seconds = float(found.group(1)) * _DURATION_UNITS[unit]
    if seconds <= 0:
        raise ConfigError(f"{what} {text!r} must be more than zero")
    return seconds


def parse_size(text: str, what: str = "a size") -> int:
    """Bytes in ``text``: a number with B, KB, MB, GB, TB or KiB, MiB, GiB, TiB (no unit: bytes)."""
    found = _NUMBER_UNIT.fullmatch(text)
    unit = found.group(2).lower() if found else None
    if found is None or unit not in _SIZE_UNITS:
        raise ConfigError(f"{what} {text!r} is not a size such as 4096, 512MiB or 1GB")
    size = int(float(found.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise ConfigError(f"{what} {text!r} must be more than zero")
    return size
