"""Strings cut to fit a size: the long strings of a payload shortened in proportion, each with a marker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import orjson

_dumps = orjson.dumps

#: Strings shorter than this are never cut when truncating.
_MIN_CUT_CHARS: Final = 64


def truncation_marker(cut_bytes: int) -> str:
    """The text that replaces the middle of a cut string."""
    return f"…[hookbus: {cut_bytes} bytes cut]…"


#: Bytes a marker may take (its count has at most this many digits).
_MARKER_ROOM: Final = len(truncation_marker(10**12).encode())


class StringCutter:
    """The long strings of a payload (a private copy, cut in place), shortened in proportion to their sizes.

    Each :meth:`cut` starts again from the original strings, so a cut string
    carries one marker naming exactly how many bytes it lost.
    """

    def __init__(self, value: Any) -> None:
        self.value = value
        #: (container, key, original text, its UTF-8 size, its size inside JSON), largest first.
        self._strings = sorted(_long_strings(value), key=lambda found: -found[4])

    def cut(self, excess: int) -> bool:
        """Shorten the largest strings by about ``excess`` JSON bytes in all; False if no string is long enough.

        Each chosen string loses a share of ``excess`` (plus its marker) in
        proportion to its size; a string whose share would not pay for its
        marker is left alone.
        """
        chosen = self._strings
        while chosen:
            need = excess + len(chosen) * _MARKER_ROOM
            total = sum(found[4] for found in chosen)
            if len(chosen) == 1 or need * chosen[-1][4] >= 2 * _MARKER_ROOM * total:
                break
            chosen = chosen[:-1]
        if not chosen:
            return False
        for container, key, text, _, _ in self._strings:
            container[key] = text
        for container, key, text, utf8_size, json_size in chosen:
            share = -(-need * json_size // total)  # JSON bytes, rounded up
            container[key] = _cut_text(text, -(-share * utf8_size // json_size))
        return True


def _cut_text(text: str, cut_bytes: int) -> str:
    """``text`` without about ``cut_bytes`` UTF-8 bytes from its middle, a marker in their place."""
    encoded = text.encode()
    cut = min(len(encoded) - _MIN_CUT_CHARS, cut_bytes)
    if cut <= 0:
        return text
    keep = len(encoded) - cut
    head = encoded[: keep // 2].decode(errors="ignore")
    tail = encoded[len(encoded) - (keep - keep // 2) :].decode(errors="ignore")
    return head + truncation_marker(len(encoded) - len(head.encode()) - len(tail.encode())) + tail


def _cuttable_strings(value: Any) -> Iterator[tuple[Any, Any, str]]:
    """Every string of ``value`` longer than the shortest one ever cut, with its container and key."""
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(item, str):
                if len(item) > _MIN_CUT_CHARS:
                    yield node, key, item
            elif isinstance(item, (dict, list)):
                stack.append(item)


def _long_strings(value: Any) -> list[tuple[Any, Any, str, int, int]]:
    """Every cuttable string of ``value`` with where it is and its sizes (UTF-8, and inside JSON)."""
    return [
        (node, key, item, len(item.encode()), len(_dumps(item)) - 2) for node, key, item in _cuttable_strings(value)
    ]


def largest_string(value: Any) -> tuple[Any, Any, str] | None:
    """The longest cuttable string of ``value``, with its container and key (output drain); the first of equals."""
    return max(_cuttable_strings(value), key=lambda found: len(found[2]), default=None)
