"""Text from others made safe to print: control characters and terminal escapes shown, not obeyed.

Hook output, session ids and payloads come from whoever published or wrote
them. Printed raw, a carriage return or an escape sequence could rewrite the
terminal, and a newline could forge a log line; shown escaped, they are plain
text.
"""

from __future__ import annotations


def visible(text: str) -> str:
    """``text`` with every non-printable character (newlines too) written as a ``\\x1b``-style escape."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def visible_lines(text: str) -> list[str]:
    """``text`` split at its newlines, each line made :func:`visible` (a trailing newline adds no line).

    Only ``\n`` ends a line: a carriage return stays in its line, escaped, so it cannot overwrite it.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [visible(line) for line in lines]


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\t":
        return "\\t"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
