"""The client's stdin and stdout read and written on the event loop, without a worker thread per message.

When both are pipes (or sockets), as an MCP client starts a stdio server,
stdin is read with non-blocking reads as it becomes readable and each answer
written in one non-blocking write (more when the pipe is full, waiting for it
to drain), where a worker thread per line read and two per message written
(its text, its flush) would cost a thread switch each. Anything else (a file,
a terminal) keeps the thread-per-read path of :mod:`bus.adapters._mcp._stdio`.

While serving, fd 1 points at stderr, so stray output of this process cannot
corrupt the wire (as the SDK's own stdio server does); it is restored on exit,
and so is each descriptor's blocking mode.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import Final

import anyio

#: Bytes one read takes from stdin at most.
_CHUNK: Final = 1 << 16


def is_pipe(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket (what the event loop can wait on)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.contextmanager
def nonblocking(fd: int) -> Iterator[int]:
    """``fd`` in non-blocking mode for the duration; its mode restored after."""
    was_blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        yield fd
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(fd, was_blocking)


@contextlib.contextmanager
def claimed_stdout() -> Iterator[int]:
    """A private descriptor of the wire on fd 1, fd 1 pointing at stderr meanwhile; restored after."""
    import fcntl

    private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        os.dup2(2, 1)
        yield private
    finally:
        with contextlib.suppress(OSError):
            os.dup2(private, 1)
        os.close(private)


class PipeReader:
    """``readline(limit)`` of a non-blocking descriptor: at most ``limit`` bytes up to a newline, b"" at its end."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._scanned = 0
        self._eof = False

    async def readline(self, limit: int) -> bytes:
        while True:
            end = self._buffer.find(b"\n", self._scanned, limit)
            if end >= 0 or len(self._buffer) >= limit or self._eof:
                cut = end + 1 if end >= 0 else min(limit, len(self._buffer))
                line = bytes(self._buffer[:cut])
                del self._buffer[:cut]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            await self._fill()

    async def _fill(self) -> None:
        await anyio.wait_readable(self._fd)
        try:
            chunk = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        if chunk:
            self._buffer += chunk
        else:
            self._eof = True


class PipeWriter:
    """The text file the SDK's stdio server writes to: ``write`` keeps the text, ``flush`` sends it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending: list[str] = []

    async def write(self, text: str) -> int:
        self._pending.append(text)
        return len(text)

    async def flush(self) -> None:
        data = memoryview("".join(self._pending).encode("utf-8"))
        self._pending.clear()
        while data:
            try:
                data = data[os.write(self._fd, data) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
