"""Isolation of a process the bus starts for a user: the one place that builds the sandbox.

:func:`sandbox` turns an argv into one run by bubblewrap (``bwrap``), with:

- its own user, PID, network, IPC and UTS namespaces, every capability
  dropped, a new session, and ``--die-with-parent``: the process sees only
  its own processes in a private ``/proc`` (not the worker's environment nor
  anyone else's), has only a loopback interface unless ``network`` is true,
  and everything it started dies when it ends (the namespace's init exits
  with it) or when the worker kills the sandbox;
- the whole file system read-only, ``/tmp``, ``/run`` and ``/dev/shm``
  empty, the workspace hidden, and only the working directory writable and
  the command and the payload file visible (read-only) again; the
  workspace's secrets inside the working directory (``api-token``,
  hooks.json, credential files, owner-only files) replaced by an empty file;
- limits: address space and CPU time as rlimits (``prlimit`` inside the
  sandbox), and the number of processes as a pids cgroup (v1 or v2,
  wherever this process may create one) or, without one, as RLIMIT_NPROC
  inside the sandbox's own user namespace (counted per sandbox). As root the
  rlimit does not hold (root is exempt), so root needs the cgroup.

When any of this cannot be had, :class:`IsolationUnavailable` says what is
missing: the caller refuses the run, it never runs the process bare.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import stat
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bus.core.config_schema import Isolation
from bus.core.errors import IsolationUnavailable

#: Files never shown to an isolated process, by name, wherever they are in its working directory.
SECRET_NAMES: Final = frozenset({"api-token", "hooks.json", "credentials", "credentials.json", ".netrc", ".env"})
#: ... and by suffix (NATS credentials and keys, TLS keys).
SECRET_SUFFIXES: Final = (".creds", ".nk", ".seed", ".key", ".pem", ".p12")
#: Where pids cgroups may be made: cgroup v1's pids hierarchy, then cgroup v2 (hybrid and unified layouts).
CGROUP_ROOTS: Final = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
_CGROUP_DIR: Final = "hookbus"
_MIB: Final = 1024 * 1024
_PROBE_TIMEOUT_S: Final = 10.0


@dataclass
class Sandbox:
    """An argv ready to spawn isolated: pass ``preexec`` to Popen, call ``close()`` once it has ended."""

    argv: list[str]
    cgroup: Path | None = None
    _procs_fd: int | None = field(default=None, repr=False)

    @property
    def preexec(self) -> Callable[[], None] | None:
        """Runs in the child before exec: join the pids cgroup (async-signal-safe: one write to an open fd)."""
        fd = self._procs_fd
        if fd is None:
            return None

        def join() -> None:
            os.write(fd, b"0")

        return join

    def close(self) -> None:
        """Release the cgroup: kill what is left in it (nothing, normally: the PID namespace took it) and remove it."""
        fd, self._procs_fd = self._procs_fd, None
        if fd is not None:
            os.close(fd)
        if self.cgroup is not None:
            _remove_cgroup(self.cgroup)
            self.cgroup = None


def sandbox(
    argv: Sequence[str],
    isolation: Isolation,
    *,
    cwd: Path,
    hidden: Sequence[Path] = (),
    readable: Sequence[Path] = (),
) -> Sandbox:
    """``argv`` run isolated in ``cwd`` (writable); ``hidden`` directories are not visible (the workspace).

    ``readable`` files or directories (the command, the payload file) are
    visible again, read-only, even inside a hidden directory. Raises
    IsolationUnavailable naming what this machine lacks.
    """
    tools = _tools()
    cgroup = _new_cgroup(isolation.max_procs)
    if cgroup is None and os.geteuid() == 0:
        raise IsolationUnavailable(
            "isolation: running as root, the process limit needs a pids cgroup this process can create "
            f"(none writable under {', '.join(map(str, CGROUP_ROOTS))}); RLIMIT_NPROC does not bind root"
        )
    limits = [f"--as={isolation.memory_mb * _MIB}", f"--cpu={isolation.cpu_s}", "--core=0"]
    if cgroup is None:
        limits.append(f"--nproc={isolation.max_procs}")
    box = [tools.bwrap, *_namespaces(isolation), *_file_system(cwd, hidden, readable), "--chdir", str(cwd)]
    wrapped = [*box, "--", tools.prlimit, *limits, "--", *argv]
    if cgroup is None:
        return Sandbox(wrapped)
    try:
        fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        _remove_cgroup(cgroup)
        raise
    return Sandbox(wrapped, cgroup, fd)


def _namespaces(isolation: Isolation) -> list[str]:
    args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not isolation.network:
        args.append("--unshare-net")
    return [*args, "--cap-drop", "ALL", "--die-with-parent", "--new-session"]


def _file_system(cwd: Path, hidden: Sequence[Path], readable: Sequence[Path]) -> list[str]:
    hidden = [path for path in hidden if path != cwd and cwd not in path.parents]  # the cwd is shown whole
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for empty in ("/tmp", "/run", "/dev/shm"):  # noqa: S108 - empty mounts inside the sandbox, not files made here
        args += ["--tmpfs", empty]
    for path in hidden:
        args += ["--tmpfs", str(path)]
    for path in readable:
        args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(cwd), str(cwd)]
    for secret in secrets_in(cwd):
        args += ["--ro-bind", "/dev/null", str(secret)]
    for path in hidden:  # empty and read-only: nothing written there outlives the run or reaches the workspace
        args += ["--remount-ro", str(path)]
    return args


def secrets_in(directory: Path) -> list[Path]:
    """The files of ``directory`` (top level) an isolated process must not read: by name, suffix or owner-only mode."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
                continue
            private = stat.S_ISREG(info.st_mode) and not info.st_mode & 0o077
            if private or entry.name in SECRET_NAMES or entry.name.endswith(SECRET_SUFFIXES):
                found.append(Path(entry.path))
    return sorted(found)


@dataclass(frozen=True)
class _Tools:
    bwrap: str
    prlimit: str


@functools.cache
def _tools() -> _Tools:
    """bwrap and prlimit, checked once per process by running a sandbox of /bin/true."""
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    if bwrap is None:
        raise IsolationUnavailable("isolation: bubblewrap (bwrap) is not installed (Debian: apt install bubblewrap)")
    if prlimit is None:
        raise IsolationUnavailable("isolation: prlimit (util-linux) is not installed")
    probe = [bwrap, *_namespaces(Isolation()), "--ro-bind", "/", "/", "--proc", "/proc", "--", prlimit, "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IsolationUnavailable(f"isolation: bubblewrap could not be run: {exc}") from None
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise IsolationUnavailable(f"isolation: bubblewrap cannot make its namespaces here: {why}")
    return _Tools(bwrap, prlimit)


@functools.cache
def _cgroup_parent() -> Path | None:
    """The directory this process may make pids cgroups in, or None."""
    for root in CGROUP_ROOTS:
        parent = root / _CGROUP_DIR
        try:
            parent.mkdir(exist_ok=True)
            probe = parent / f"probe-{os.getpid()}"
            probe.mkdir()
        except OSError:
            continue
        usable = (probe / "pids.max").exists() and (probe / "cgroup.procs").exists()
        with contextlib.suppress(OSError):
            probe.rmdir()
        if usable:
            return parent
    return None


#: Cgroups that were still busy when their sandbox closed (the namespace was still being torn down).
_LEFTOVER: set[Path] = set()


def _new_cgroup(max_procs: int) -> Path | None:
    parent = _cgroup_parent()
    if parent is None:
        return None
    for old in list(_LEFTOVER):
        _remove_cgroup(old)
    path = parent / uuid.uuid4().hex
    path.mkdir()
    try:
        (path / "pids.max").write_text(str(max_procs))
    except OSError:
        _remove_cgroup(path)
        raise
    return path


def _remove_cgroup(path: Path) -> None:
    """Kill whatever is still in the cgroup, then remove it; one still busy is removed at the next sandbox."""
    with contextlib.suppress(OSError):
        for line in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(line), signal.SIGKILL)
    try:
        path.rmdir()
    except FileNotFoundError:
        _LEFTOVER.discard(path)
    except OSError:
        _LEFTOVER.add(path)
    else:
        _LEFTOVER.discard(path)


def run_isolated(argv: Sequence[str], isolation: Isolation, cwd: Path, hidden: Sequence[Path] = ()) -> int:
    """Run ``argv`` in the sandbox with this process's standard streams and environment; its exit status.

    ``hookbus isolate`` uses it for any command a user wants fenced in (the
    record runner, an agent's tool); raises IsolationUnavailable, never runs bare.
    """
    command = shutil.which(argv[0]) or argv[0]
    readable = [Path(command)] if os.sep in command else []
    box = sandbox([command, *argv[1:]], isolation, cwd=cwd.resolve(), hidden=hidden, readable=readable)
    try:
        return subprocess.run(box.argv, cwd=cwd, preexec_fn=box.preexec, check=False).returncode
    finally:
        box.close()
