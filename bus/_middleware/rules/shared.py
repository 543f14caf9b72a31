"""The reads a run's conditions share, made once per evaluation: ``cel.bind`` around the run's program.

cel-cpp has no common-subexpression pass: in a run of 100 conditions over
``payload.input.command`` it selects ``payload``, ``input`` and ``command``
again for every one, which is most of a condition's cost. A field path that
two or more conditions of a run read (``payload.input.command``, ``ctx.agent``)
is bound once with ``cel.bind(__hb0, payload.input.command, ...)`` and the
conditions read the bound name instead. CEL has no side effects and its errors
are values, so the bound name is the same value, or the same error, as the
path read in place: the program's result is unchanged (a missing key is still
the same error where a condition reads it, and ``true || error`` still holds).

The rewrite reads the CEL text, not its syntax tree (the binding exposes none),
so it is conservative: string literals and comments are left alone, a path
under ``has()`` is never replaced, and a condition it cannot read surely (a
raw string, a comprehension variable named ``payload``, ``ctx`` or ``bag``, or a
name with the bound names' prefix) is joined as it was written.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Final

#: Prefix of the bound names (a condition that mentions it is not rewritten).
PREFIX: Final = "__hb"
#: Paths bound per program at most (the most read first).
BOUND_LIMIT: Final = 32

_PATH: Final = re.compile(r"(?<![\w.])(?:payload|ctx|bag)(?:\.[A-Za-z_]\w*)+")
_CALL: Final = re.compile(r"\s*\(")
_HAS: Final = re.compile(r"\bhas\s*\(\s*$")
_SHADOW: Final = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*(?:payload|ctx|bag)\b")
_QUOTES: Final = ('"""', "'''", '"', "'")


def blanked(source: str) -> str | None:
    """``source`` with every string literal and comment replaced by ``#`` (same length); None when unsure."""
    out: list[str] = []
    index, size = 0, len(source)
    while index < size:
        char = source[index]
        if source.startswith("//", index):
            end = source.find("\n", index)
            end = size if end < 0 else end
            out.append("#" * (end - index))
            index = end
            continue
        if char not in "\"'":
            out.append(char)
            index += 1
            continue
        if "r" in source[max(index - 2, 0) : index].lower():  # a raw string (r"", rb"", br""): no escapes
            return None
        quote = next(q for q in _QUOTES if source.startswith(q, index))
        end = _literal_end(source, index + len(quote), quote)
        if end < 0:
            return None
        out.append("#" * (end - index))
        index = end
    return "".join(out)


def _literal_end(source: str, index: int, quote: str) -> int:
    """The index after the literal's closing quote, or -1."""
    while index < len(source):
        if source[index] == "\\":
            index += 2
        elif source.startswith(quote, index):
            return index + len(quote)
        elif len(quote) == 1 and source[index] == "\n":
            return -1
        else:
            index += 1
    return -1


def paths(source: str) -> list[tuple[int, int]] | None:
    """The spans of ``source``'s field paths a bound name may replace; None when the condition is not rewritten."""
    code = blanked(source)
    if code is None or PREFIX in code or _SHADOW.search(code):
        return None
    spans = []
    for found in _PATH.finditer(code):
        start, end = found.span()
        if code[:start].rstrip().endswith(".") or _HAS.search(code, 0, start):
            continue
        if _CALL.match(code, end):  # ``payload.input.command.contains(``: the path ends before the method
            end = code.rfind(".", start, end)
            if end <= code.find(".", start):
                continue
        spans.append((start, end))
    return spans


def shared(sources: Sequence[str]) -> tuple[list[str], list[str]]:
    """The paths read by two conditions or more (the most read first), and the conditions reading their bound
    names (``__hb0`` for the first path...) in place of them."""
    found = [paths(source) for source in sources]
    counts = Counter(
        path for source, spans in zip(sources, found, strict=True) if spans for path in {source[a:b] for a, b in spans}
    )
    bound = [path for path, count in counts.most_common(BOUND_LIMIT) if count > 1]
    names = {path: f"{PREFIX}{index}" for index, path in enumerate(bound)}
    out = []
    for source, spans in zip(sources, found, strict=True):
        text, last = [], 0
        for start, end in spans or ():
            name = names.get(source[start:end])
            if name is not None:
                text += [source[last:start], name]
                last = end
        out.append("".join(text) + source[last:])
    return bound, out


def bind(bound: Sequence[str], body: str) -> str:
    """``body`` with each of ``bound`` bound to its name (``cel.bind``, outermost first)."""
    for index in reversed(range(len(bound))):
        body = f"cel.bind({PREFIX}{index}, {bound[index]}, {body})"
    return body
