"""Hook child processes, waited on through a pidfd instead of a thread.

On Python 3.11 asyncio's default child watcher starts one thread per child
process; a worker running hundreds of hooks a second pays a thread start (and
the GIL hand-offs that go with it) for every hook. On Linux a pidfd becomes
readable when its process exits, so the event loop waits for it like for a
socket, and the output pipe is read the same way. Where ``os.pidfd_open`` is
missing, a worker thread waits for the process instead.

The child leads a new session (its own process group), so that timeouts and
shutdown can signal everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

#: Seconds between SIGTERM and SIGKILL on a timeout (PRX: 5 s).
DEFAULT_KILL_GRACE: Final = 5.0
_READ_CHUNK: Final = 65536
_HAS_PIDFD: Final = hasattr(os, "pidfd_open")


class OutputTail:
    """One output stream of a hook: its last ``limit`` bytes, and how many it wrote in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk[-self.limit :] if self.limit else b""
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]


class HookProcess:
    """A running hook: its pid, its exit, the bounded tails of its stdout and stderr."""

    def __init__(
        self, popen: subprocess.Popen[bytes], out_fds: tuple[int, int], stdin_data: bytes | None, output_limit: int
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._popen = popen
        self.pid = popen.pid
        self.stdout = OutputTail(output_limit)
        self.stderr = OutputTail(output_limit)
        self._open: dict[int, OutputTail] = dict(zip(out_fds, (self.stdout, self.stderr), strict=True))
        self._eof = self._loop.create_future()
        for fd in out_fds:
            os.set_blocking(fd, False)
            self._loop.add_reader(fd, self._on_output, fd)
        self._pidfd: int | None = None
        self._exited = self._watch_exit()
        self._stdin = _StdinFeeder(self._loop, popen, stdin_data) if popen.stdin is not None else None

    def _watch_exit(self) -> asyncio.Future[int]:
        if not _HAS_PIDFD:
            return asyncio.ensure_future(asyncio.to_thread(self._popen.wait))
        exited: asyncio.Future[int] = self._loop.create_future()
        self._pidfd = os.pidfd_open(self.pid)

        def on_exit() -> None:
            self._stop_watching()
            code = self._popen.poll()  # a readable pidfd means exited: this reaps without blocking
            if not exited.done():
                exited.set_result(code if code is not None else self._popen.wait())

        self._loop.add_reader(self._pidfd, on_exit)
        return exited

    def _stop_watching(self) -> None:
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            self._loop.remove_reader(pidfd)
            os.close(pidfd)

    def reap(self, timeout: float = 1.0) -> None:
        """Wait (blocking, bounded) for a process already sent SIGKILL, so no zombie or Popen is left behind.

        For shutdown, when the loop may stop before the exit would be noticed.
        """
        self._stop_watching()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def _on_output(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            self._close_output(fd)
            return
        self._open[fd].add(chunk)

    def _close_output(self, *fds: int) -> None:
        for fd in fds or list(self._open):
            if self._open.pop(fd, None) is not None:
                self._loop.remove_reader(fd)
                os.close(fd)
        if not self._open and not self._eof.done():
            self._eof.set_result(None)

    async def wait(self) -> int:
        """The exit status (negative: killed by that signal)."""
        return await asyncio.shield(self._exited)

    async def finish_output(self, linger: float) -> bool:
        """Wait up to ``linger`` s for the output to end; False if a background process still holds it."""
        if not self._eof.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._eof), linger)
        complete = self._eof.done()
        self.close()
        return complete

    def close(self) -> None:
        """Release the pipes (the process itself is the caller's to kill)."""
        self._close_output()
        if self._stdin is not None:
            self._stdin.close()


class _StdinFeeder:
    """Writes the payload to the child's stdin without blocking, then closes it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, popen: subprocess.Popen[bytes], data: bytes | None) -> None:
        assert popen.stdin is not None
        self._loop = loop
        self._file = popen.stdin
        self._fd = popen.stdin.fileno()
        self._data = memoryview(data or b"")
        self._watching = False
        os.set_blocking(self._fd, False)
        self._write()

    def _write(self) -> None:
        try:
            while self._data:
                self._data = self._data[os.write(self._fd, self._data) :]
        except BlockingIOError:
            if not self._watching:
                self._loop.add_writer(self._fd, self._write)
                self._watching = True
            return
        except OSError:  # the hook closed stdin or exited: it does not want the rest
            pass
        self.close()

    def close(self) -> None:
        if self._watching:
            self._loop.remove_writer(self._fd)
            self._watching = False
        if not self._file.closed:
            self._file.close()


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdin_data: bytes | None,
    output_limit: int,
    preexec: Callable[[], None] | None = None,
) -> HookProcess:
    """Start ``argv`` in a new session; stdout and stderr go to two pipes, each keeping its last bytes.

    ``stdin_data`` None gives the child /dev/null. ``preexec`` runs in the
    child before exec (an isolated run joins its cgroup there). Raises
    OSError when the command cannot be started (not found, not executable,
    bad cwd).
    """
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=out_write,
            stderr=err_write,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            preexec_fn=preexec,
        )
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return HookProcess(popen, (out_read, err_read), stdin_data, output_limit)


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
