"""The shell-hook worker's default limits: the one place that sets them.

Kept apart from the worker so that command-line parsers can show them without
loading the worker.
"""

from __future__ import annotations

from typing import Final

from subscribers.shell_hooks._subjects import SHELL_QUEUE

#: The queue group shell workers join unless told otherwise: start more workers to share the load.
DEFAULT_QUEUE: Final = SHELL_QUEUE
#: Hook processes running at once, per event key of hooks.json (each key is bounded on its own).
DEFAULT_MAX_PROCS: Final = 16
#: Events of one key waiting for a process slot before that key's new events are shed.
DEFAULT_QUEUE_SIZE: Final = 1000
#: How often hooks.json is checked for changes (seconds).
DEFAULT_POLL_INTERVAL: Final = 0.5
#: How long stopping a worker lets running hooks finish before killing their process groups.
DEFAULT_DRAIN_TIMEOUT: Final = 5.0
#: Bytes of each output stream (stdout, stderr) of a hook run kept for the log and the journal: the last ones.
DEFAULT_OUTPUT_TAIL: Final = 4096
#: The most a worker may be told to keep per stream: the journal keeps no more (bus._journal.entries.OUTPUT_CAP).
MAX_OUTPUT_TAIL: Final = 8192
