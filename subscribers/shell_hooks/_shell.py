"""Run one shell hook process, exactly as the PRX document describes.

The event's envelope JSON reaches the process through three channels at once:
``ZERO_HOOK_PAYLOAD`` (over 8 KiB it is set but empty and
``ZERO_HOOK_PAYLOAD_TRUNCATED=1`` says so, as PRX does), a temporary file named
by ``ZERO_HOOK_PAYLOAD_FILE`` (removed when the process ends) and, with
``stdin_json``, standard input. The file and stdin carry the whole payload: for
an event over the bus limit it is fetched from the object store (the claim
check) and the hook reads one envelope as if nothing had been cut. The environment is rebuilt from nothing: a safe
PATH, the ``ZERO_HOOK_*`` variables, ``HOOKBUS_DEPTH`` (event depth + 1, so that
``hookbus emit`` inside the hook carries the recursion counter), ``NATS_URL``
without credentials, then the variables the action's ``env`` may set (see
:mod:`bus._sandbox.security`). A NUL byte from the event (session id,
event name, timestamp) refuses the run: it cannot reach an environment.

The process leads its own process group: a timeout sends SIGTERM to the whole
group, then SIGKILL after a grace period. Stdout and stderr are read to the end
and the last bytes of each are kept (for the log and the journal).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bus._core.depth import DEPTH_ENV, child_depth
from bus._core.envelope import Event
from bus._core.errors import PayloadRefError
from bus._runtime.ratelog import RateLimitedLog
from bus._runtime.tracing import pass_to_child
from bus._sandbox.errors import IsolationUnavailable
from bus._sandbox.isolation import sandbox
from bus._sandbox.outcome import HookOutcome
from bus._sandbox.process import DEFAULT_KILL_GRACE, HookProcess, kill_group, spawn
from bus._sandbox.security import (
    is_allowed_env,
    nul_problem,
    public_url,
    resolve_command,
    resolve_cwd,
    safe_path,
)
from subscribers.shell_hooks._hooks_config import HookEntry, isolation_of

#: Above this many bytes ZERO_HOOK_PAYLOAD is empty and ZERO_HOOK_PAYLOAD_TRUNCATED=1 (PRX: 8 KiB).
ENV_PAYLOAD_LIMIT: Final = 8 * 1024
log = logging.getLogger("hookbus.shell_hooks")
_fetch_log = RateLimitedLog(log, interval=5.0)
#: Bytes of each of a hook's output streams kept (the last ones) for the log and the journal.
DEFAULT_OUTPUT_LIMIT: Final = 4096
#: How long to keep reading output after the process exits (background children may hold the pipe).
_OUTPUT_LINGER: Final = 0.5
_ABANDONED: Final = b"\n[output cut short: a background process of the hook kept the pipe open]"


@dataclass(frozen=True, slots=True)
class HookResult:
    """What one hook run did."""

    hook_id: str
    event: str
    outcome: HookOutcome
    exit_code: int | None = None
    duration: float = 0.0
    #: The last bytes of stdout and of stderr, and how many bytes each stream had in all.
    stdout: bytes = b""
    stdout_bytes: int = 0
    reason: str | None = None
    #: True when the timeout had to escalate to SIGKILL.
    killed: bool = False
    stderr: bytes = b""
    stderr_bytes: int = 0


class ShellRunner:
    """Starts hook processes for one workspace and keeps track of the running ones."""

    def __init__(
        self,
        workspace: Path,
        *,
        nats_url: str | None = None,
        kill_grace: float = DEFAULT_KILL_GRACE,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> None:
        self.workspace = workspace.resolve()
        self.nats_url = nats_url
        self.kill_grace = kill_grace
        self.output_limit = output_limit
        self._path = safe_path()
        #: Process-group ids of hooks running now (killed on shutdown).
        self.running: set[int] = set()
        #: hooks.json's top-level ``isolation``: the default of actions without their own.
        self.default_isolation: object = None

    def environment(self, entry: HookEntry, event: Event, payload_file: str, payload: bytes) -> dict[str, str]:
        """The sanitised environment of one hook process (``payload``: the envelope the hook reads)."""
        env = {key: value for key, value in entry.action.env.items() if is_allowed_env(key)}
        url = env.get("NATS_URL") or self.nats_url
        if url:
            env["NATS_URL"] = public_url(url)
        env["PATH"] = self._path
        env["ZERO_HOOK_EVENT"] = event.event
        env["ZERO_HOOK_SESSION"] = event.session_id or ""
        env["ZERO_HOOK_TIMESTAMP"] = event.timestamp
        env["ZERO_HOOK_PAYLOAD_FILE"] = payload_file
        env.pop("ZERO_HOOK_PAYLOAD_TRUNCATED", None)
        if len(payload) <= ENV_PAYLOAD_LIMIT:
            env["ZERO_HOOK_PAYLOAD"] = payload.decode()
        else:  # execve's limits: the file and stdin carry it
            env["ZERO_HOOK_PAYLOAD"] = ""
            env["ZERO_HOOK_PAYLOAD_TRUNCATED"] = "1"
        env[DEPTH_ENV] = str(child_depth(event.depth))
        pass_to_child(env, event.traceparent)  # W3C TRACEPARENT: the run's span, else the emitter's
        return env

    async def run(self, entry: HookEntry, event: Event) -> HookResult:
        """Run ``entry`` for ``event``; never raises for the hook's own trouble."""
        if entry.refused is not None:
            return HookResult(entry.id, entry.event, HookOutcome.REFUSED, reason=entry.refused)
        cwd, problem = resolve_cwd(entry.action.cwd, self.workspace)
        if cwd is None:
            return HookResult(entry.id, entry.event, HookOutcome.REFUSED, reason=problem)
        payload = await hook_payload(event)
        fd, payload_file = tempfile.mkstemp(prefix="hookbus-hook-", suffix=".json")
        try:
            try:
                _write_all(fd, payload)
            finally:
                os.close(fd)
            return await self._spawn(entry, event, cwd, payload_file, payload)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(payload_file)

    async def _spawn(self, entry: HookEntry, event: Event, cwd: Path, payload_file: str, payload: bytes) -> HookResult:
        action = entry.action
        command = resolve_command(action.command, self.workspace)
        env = self.environment(entry, event, payload_file, payload)
        refused = nul_problem([command, *action.args, str(cwd)], env)
        if refused is not None:
            return HookResult(entry.id, entry.event, HookOutcome.REFUSED, reason=f"event refused: {refused}")
        argv, box = [command, *action.args], None
        isolation = isolation_of(action, self.default_isolation)
        if isolation is not None:
            readable = [Path(payload_file), *([Path(command)] if os.sep in command else [])]  # Path drops "./"
            try:
                # cwd not given: a private scratch directory; the workspace (cwd or not) is hidden
                box = sandbox(argv, isolation, hidden=[self.workspace], readable=readable)
            except (IsolationUnavailable, OSError) as exc:  # never run bare what was to run isolated
                return HookResult(entry.id, entry.event, HookOutcome.REFUSED, reason=f"not run: {exc}")
            argv = box.argv
        started = time.monotonic()
        try:
            try:
                proc = spawn(
                    argv,
                    env=env,
                    cwd=cwd,
                    stdin_data=payload if action.stdin_json else None,
                    output_limit=self.output_limit,
                    preexec=box.preexec if box is not None else None,
                )
            except (OSError, ValueError, subprocess.SubprocessError) as exc:  # ValueError: what execve cannot take
                reason = f"cannot start {command!r}: {getattr(exc, 'strerror', None) or exc}"
                return HookResult(
                    entry.id, entry.event, HookOutcome.FAILED, duration=time.monotonic() - started, reason=reason
                )
            self.running.add(proc.pid)
            try:
                return await self._supervise(entry, proc, started)
            finally:
                self.running.discard(proc.pid)
                proc.close()
        finally:
            if box is not None:
                box.close()

    async def _supervise(self, entry: HookEntry, proc: HookProcess, started: float) -> HookResult:
        deadline = _Deadline(proc.pid, entry.action.timeout_ms / 1000, self.kill_grace)
        try:
            code = await proc.wait()
        except BaseException:  # cancelled (worker shutdown): leave nothing running, nothing unreaped
            kill_group(proc.pid, signal.SIGKILL)
            proc.reap()
            raise
        finally:
            deadline.cancel()
        duration = time.monotonic() - started
        complete = await proc.finish_output(_OUTPUT_LINGER)
        stdout, stderr = bytes(proc.stdout.data), bytes(proc.stderr.data)
        if not complete:
            stderr += _ABANDONED
        reason: str | None
        if deadline.expired:
            outcome = HookOutcome.TIMEOUT
            escalated = "; SIGKILL after grace" if deadline.killed else ""
            reason = f"timed out after {entry.action.timeout_ms} ms{escalated}"
        else:
            outcome = HookOutcome.OK if code == 0 else HookOutcome.FAILED
            reason = None if code == 0 else _exit_reason(code)
        return HookResult(
            entry.id,
            entry.event,
            outcome,
            code,
            duration,
            stdout,
            proc.stdout.total,
            reason,
            deadline.killed,
            stderr,
            proc.stderr.total,
        )

    def kill_all(self) -> int:
        """SIGKILL the process group of every running hook (worker shutdown); how many."""
        groups = list(self.running)
        for pgid in groups:
            kill_group(pgid, signal.SIGKILL)
        return len(groups)


class _Deadline:
    """A hook's timeout: SIGTERM to its group when it expires, SIGKILL after the grace.

    Timers on the loop rather than a task per run: the common case (the hook
    ends in time) costs one cancelled timer handle.
    """

    def __init__(self, pgid: int, timeout: float, grace: float) -> None:
        self.pgid = pgid
        self.grace = grace
        self.expired = False
        self.killed = False
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(timeout, self._expire)

    def _expire(self) -> None:
        self.expired = True
        kill_group(self.pgid, signal.SIGTERM)
        self._timer = self._loop.call_later(self.grace, self._kill)

    def _kill(self) -> None:
        self.killed = True
        self._timer = None
        kill_group(self.pgid, signal.SIGKILL)

    def cancel(self) -> None:
        """The leader exited: stop the timers; after a timeout, SIGKILL group members that ignored TERM."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.expired and not self.killed:
            kill_group(self.pgid, signal.SIGKILL)


async def hook_payload(event: Event) -> bytes:
    """The envelope a hook reads: with the whole payload, fetched for a claimed event (once per event).

    When the whole payload cannot be had (the reference refused, the object
    gone or not what it names) the hook gets the envelope as received: its
    preview, flagged ``truncated``, and the reason is logged.
    """
    if event.payload_ref is None:
        return event.raw
    try:
        return await event.full_raw()
    except PayloadRefError as exc:
        _fetch_log.warning("%s; the hook gets the preview", exc)
        return event.raw


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
