"""``hookbus mcp``'s stdio on pipes: the same lines as the thread-per-read path, and whole writes past a full pipe."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import termios
from pathlib import Path

import anyio

from bus.adapters._mcp._messages import OVERSIZED
from bus.adapters._mcp._pipes import PipeReader, PipeWriter, is_pipe, nonblocking
from bus.adapters._mcp._stdio import BoundedLines

MAX = 100
WIRE = (
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
    + b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"text":"'
    + b"x" * 300
    + b'"}}\n'
    + b"y" * MAX
    + b"\n"  # exactly the limit: passes
    + b'{"jsonrpc":"2.0","id":2,"method":"ping"}'  # the last line, without its newline
)


async def lines_of(source: BoundedLines) -> list[str]:
    return [line async for line in source]


async def test_pipe_lines_are_the_thread_paths_lines_in_chunks_of_any_size() -> None:
    expected = await lines_of(BoundedLines(io.BytesIO(WIRE), MAX))
    assert any(OVERSIZED in line and '"id":7' in line for line in expected)
    for step in (1, 7, 64, len(WIRE)):
        read_end, write_end = os.pipe()
        assert is_pipe(read_end)

        async def feed(write_end: int = write_end, step: int = step) -> None:
            for start in range(0, len(WIRE), step):
                os.write(write_end, WIRE[start : start + step])
                await anyio.sleep(0)
            os.close(write_end)

        try:
            with nonblocking(read_end):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(feed)
                    got = await lines_of(BoundedLines(PipeReader(read_end), MAX))
        finally:
            os.close(read_end)
        assert got == expected, step


async def test_lines_left_after_a_read_that_ended_a_partial_line_are_each_their_own() -> None:
    read_end, write_end = os.pipe()
    got: list[bytes] = []
    try:
        with nonblocking(read_end):
            reader = PipeReader(read_end)
            os.write(write_end, b"ab")
            async with anyio.create_task_group() as tg:
                tg.start_soon(_append, got, reader)
                while _unread(read_end):  # the partial line read, the reader waiting for the rest
                    await anyio.sleep(0.01)
                os.write(write_end, b"c\n1\n2\n")
            with anyio.fail_after(30):  # a reader that ran two lines together would wait for a third
                got += [await reader.readline(MAX), await reader.readline(MAX)]
    finally:
        os.close(read_end)
        os.close(write_end)
    assert got == [b"abc\n", b"1\n", b"2\n"]


def _unread(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


async def _append(got: list[bytes], reader: PipeReader) -> None:
    got.append(await reader.readline(MAX))


async def test_a_write_larger_than_the_pipe_waits_for_it_to_drain_and_arrives_whole() -> None:
    text = "z" * (1 << 20) + "\n"
    read_end, write_end = os.pipe()
    received = bytearray()

    def drain() -> None:
        while chunk := os.read(read_end, 1 << 16):
            received.extend(chunk)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, drain)
            with nonblocking(write_end):
                writer = PipeWriter(write_end)
                await writer.write(text[:10])
                await writer.write(text[10:])
                await writer.flush()
            os.close(write_end)
    finally:
        os.close(read_end)
    assert received.decode() == text


def test_only_pipes_and_sockets_take_the_event_loop_path(tmp_path: Path) -> None:
    with (tmp_path / "file").open("wb") as regular:
        assert not is_pipe(regular.fileno())
    read_end, write_end = os.pipe()
    try:
        assert is_pipe(read_end) and is_pipe(write_end)
    finally:
        os.close(read_end)
        os.close(write_end)
