"""Typed settings of the shell-hook worker and the plugins beside it, as ``hookbus up``, ``hookbus worker`` build them.

Light on purpose (no worker, no aiohttp): the command line builds these from
its flags; the worker and the service take them, never the parsed flags.
"""

from __future__ import annotations

from dataclasses import dataclass

from bus._core.errors import ConfigError
from bus._sandbox.process import DEFAULT_KILL_GRACE
from subscribers.shell_hooks._limits import (
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_MAX_PROCS,
    DEFAULT_OUTPUT_TAIL,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_SIZE,
    MAX_OUTPUT_TAIL,
)


@dataclass(frozen=True)
class WorkerSettings:
    """How a ShellWorker runs hooks: its queue group, process and queue bounds, grace and drain times.

    ``queue`` None (or '') joins no queue group: every worker gets every event.
    """

    queue: str | None = DEFAULT_QUEUE
    max_procs: int = DEFAULT_MAX_PROCS
    queue_size: int = DEFAULT_QUEUE_SIZE
    kill_grace_s: float = DEFAULT_KILL_GRACE
    poll_interval_s: float = DEFAULT_POLL_INTERVAL
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    #: Bytes of each output stream of a run kept (the last ones) for the log and the journal; 0: none.
    output_tail_bytes: int = DEFAULT_OUTPUT_TAIL

    def __post_init__(self) -> None:
        if self.max_procs < 1 or self.queue_size < 1:
            raise ConfigError(f"max_procs and queue_size must be at least 1 (got {self.max_procs}, {self.queue_size})")
        if self.kill_grace_s < 0:
            raise ConfigError(f"kill_grace_s must not be negative (got {self.kill_grace_s})")
        if not 0 <= self.output_tail_bytes <= MAX_OUTPUT_TAIL:
            raise ConfigError(f"output_tail_bytes must be in 0..{MAX_OUTPUT_TAIL} (got {self.output_tail_bytes})")
        if not self.queue:
            object.__setattr__(self, "queue", None)
