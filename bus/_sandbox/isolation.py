"""Isolation of a process the bus starts for a user: the one place that builds the sandbox.

:func:`sandbox` turns an argv into one run by bubblewrap (``bwrap``), with:

- its own user, PID, network, IPC and UTS namespaces, every capability
  dropped, a new session, and ``--die-with-parent``: the process sees only
  its own processes in a private ``/proc`` (not the worker's environment nor
  anyone else's), has only a loopback interface unless ``network`` is true,
  and everything it started dies when it ends (the namespace's init exits
  with it) or when the worker kills the sandbox;
- the whole file system read-only, ``/tmp``, ``/run`` and ``/dev/shm``
  empty, the workspace hidden (an empty read-only directory: its
  configuration, stores, journal, drain and secrets out of sight, and no
  name there, present or missing, can be written), and the command and the
  payload file visible (read-only) again. The working directory is a
  private scratch directory (:data:`SCRATCH`, empty, gone with the run)
  unless the caller asks for a host directory to be writable
  (``hookbus isolate`` in a directory that is not hidden), whose secrets
  (``api-token``, hooks.json, credential files, owner-only files) are then
  replaced by an empty file. Nothing on the host is writable from a shell
  hook's sandbox, so no script another hook runs can be rewritten there;
- limits: address space and CPU time as rlimits set in the child before
  bubblewrap starts (everything inside inherits them), and the number of
  processes as a pids cgroup (v1 or v2, wherever this process may create
  one) or, without one, as RLIMIT_NPROC set by ``prlimit`` inside the
  sandbox's own user namespace (counted per sandbox). Root is exempt from
  RLIMIT_NPROC, so root needs the cgroup.

When any of this cannot be had, :class:`IsolationUnavailable` says what is
missing: the caller refuses the run, it never runs the process bare.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import stat
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bus._sandbox.config_schema import Isolation
from bus._sandbox.errors import IsolationUnavailable

#: Files never shown to an isolated process, by name, wherever they are in its working directory.
SECRET_NAMES: Final = frozenset(
    {"api-token", "ask-link-key", "hooks.json", "credentials", "credentials.json", ".netrc", ".env"}
)
#: ... and by suffix (NATS credentials and keys, TLS keys).
SECRET_SUFFIXES: Final = (".creds", ".nk", ".seed", ".key", ".pem", ".p12")
#: The private working directory of a sandbox without a writable host directory: inside its own empty
#: ``/tmp``, so whatever is written there is gone with the run and reaches no file on the host.
SCRATCH: Final = Path("/tmp/hookbus-scratch")  # noqa: S108 - inside the sandbox's private /tmp, not a host file
#: Where pids cgroups may be made: cgroup v1's pids hierarchy, then cgroup v2 (hybrid and unified layouts).
CGROUP_ROOTS: Final = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
_CGROUP_DIR: Final = "hookbus"
_MIB: Final = 1024 * 1024
_PROBE_TIMEOUT: Final = 10.0


@dataclass
class Sandbox:
    """An argv ready to spawn isolated: pass ``preexec`` to Popen, call ``close()`` once it has ended."""

    argv: list[str]
    #: (resource, limit) set, soft and hard, in the child before bubblewrap starts: inherited by all inside.
    rlimits: tuple[tuple[int, int], ...] = ()
    cgroup: Path | None = None
    _procs_fd: int | None = field(default=None, repr=False)

    @property
    def preexec(self) -> Callable[[], None]:
        """Runs in the child before exec: join the pids cgroup and set the rlimits (system calls only)."""
        fd, limits = self._procs_fd, self.rlimits

        def enter() -> None:
            if fd is not None:
                os.write(fd, b"0")
            for which, value in limits:
                resource.setrlimit(which, (value, value))

        return enter

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
    cwd: Path | None = None,
    hidden: Sequence[Path] = (),
    readable: Sequence[Path] = (),
) -> Sandbox:
    """``argv`` run isolated; ``hidden`` directories are not visible (the workspace).

    It runs in ``cwd``, writable, when one is given outside every hidden
    directory; otherwise in :data:`SCRATCH`, private and empty (a shell hook
    always: nothing of the host is writable from it). ``readable`` files or
    directories inside a hidden one (the command, the payload file) are
    visible again, read-only. Raises IsolationUnavailable naming what this
    machine lacks.
    """
    bwrap = _bwrap()
    cgroup = _new_cgroup(isolation.max_procs)
    nproc: list[str] = []
    if cgroup is None:  # RLIMIT_NPROC set inside the sandbox's user namespace: it counts that namespace only
        if os.geteuid() == 0:
            raise IsolationUnavailable(
                "isolation: running as root, the process limit needs a pids cgroup this process can create "
                f"(none writable under {', '.join(map(str, CGROUP_ROOTS))}); RLIMIT_NPROC does not bind root"
            )
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            raise IsolationUnavailable("isolation: no pids cgroup can be made here and prlimit (util-linux) is missing")
        nproc = [prlimit, f"--nproc={isolation.max_procs}", "--"]
    writable = cwd if cwd is not None and not _inside(cwd, hidden) else None
    workdir = writable or SCRATCH
    box = [bwrap, *_namespaces(isolation), *_file_system(writable, hidden, readable), "--chdir", str(workdir)]
    rlimits = (
        (resource.RLIMIT_AS, isolation.memory_mb * _MIB),
        (resource.RLIMIT_CPU, isolation.cpu_s),
        (resource.RLIMIT_CORE, 0),
    )
    wrapped = [*box, "--", *nproc, *argv]
    if cgroup is None:
        return Sandbox(wrapped, rlimits)
    try:
        fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        _remove_cgroup(cgroup)
        raise
    return Sandbox(wrapped, rlimits, cgroup, fd)


def _namespaces(isolation: Isolation) -> list[str]:
    args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not isolation.network:
        args.append("--unshare-net")
    return [*args, "--cap-drop", "ALL", "--die-with-parent", "--new-session"]


def _inside(path: Path, directories: Sequence[Path]) -> bool:
    return any(path == directory or directory in path.parents for directory in directories)


#: Directories the sandbox gets empty and private (scratch space gone with the run).
_PRIVATE: Final = (Path("/tmp"), Path("/run"), Path("/dev/shm"))  # noqa: S108 - mounts inside the sandbox


def _file_system(writable: Path | None, hidden: Sequence[Path], readable: Sequence[Path]) -> list[str]:
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for empty in _PRIVATE:
        args += ["--tmpfs", str(empty)]
    for path in hidden:
        args += ["--tmpfs", str(path)]
    for path in readable:  # what is outside the hidden and private directories is visible (read-only) already
        if _inside(path, [*hidden, *_PRIVATE]):
            args += ["--ro-bind", str(path), str(path)]
    if writable is None:
        args += ["--dir", str(SCRATCH)]
    else:
        args += ["--bind", str(writable), str(writable)]
        for secret in secrets_in(writable):
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


@functools.cache
def _bwrap() -> str:
    """bwrap's path, checked once per process by running a sandbox of ``true``."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise IsolationUnavailable("isolation: bubblewrap (bwrap) is not installed (Debian: apt install bubblewrap)")
    probe = [bwrap, *_namespaces(Isolation()), "--ro-bind", "/", "/", "--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=_PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IsolationUnavailable(f"isolation: bubblewrap could not be run: {exc}") from None
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise IsolationUnavailable(f"isolation: bubblewrap cannot make its namespaces here: {why}")
    return bwrap


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
            _sweep_dead_owners(parent)
            return parent
    return None


def _sweep_dead_owners(parent: Path) -> None:
    """Remove the cgroups of processes that are gone (named ``<owner pid>-<id>``): what their closes left busy."""
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            owner = child.name.partition("-")[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                _remove_cgroup(child)
                _LEFTOVER.discard(child)


#: Cgroups that were still busy when their sandbox closed (the namespace was still being torn down).
_LEFTOVER: set[Path] = set()


def _new_cgroup(max_procs: int) -> Path | None:
    parent = _cgroup_parent()
    if parent is None:
        return None
    for old in list(_LEFTOVER):
        _remove_cgroup(old)
    path = parent / f"{os.getpid()}-{uuid.uuid4().hex}"
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
    # cwd inside a hidden directory: the command runs in the private scratch directory instead
    try:
        return subprocess.run(box.argv, cwd=cwd, preexec_fn=box.preexec, check=False).returncode
    finally:
        box.close()
