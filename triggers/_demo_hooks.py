"""The demo's own shell hooks: a worker of its own on a temporary workspace, so the hook panels fill.

``hookbus demo`` runs them beside the fleet (``--no-hooks`` does not): an
audit hook on every tool call, which succeeds, and a check on every LLM
response that fails now and then, as real hooks do. The worker joins a queue
group of its own, so the workspace's hooks under ``hookbus up`` still get
every event, and its runs are journaled like any worker's (kind
``shell_hook``), which is where the fleet series count them.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from bus._client import Bus
from bus._core.clock import random_hex
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker

#: hook id -> (event, script): the script reads the payload from stdin, as PRX hooks may.
HOOKS: Final = {
    "demo-audit": ("tool_call", "#!/bin/sh\ncat > /dev/null\n"),
    # fails on about one response in four: the failure panels have something to show
    "demo-llm-check": ("llm_response", "#!/bin/sh\ncat > /dev/null\n[ $(( $$ % 4 )) -ne 0 ]\n"),
    # a pager that hangs on every error: stopped at its timeout (TIMEOUT_MS), as slow hooks are
    "demo-pager": ("error", "#!/bin/sh\ncat > /dev/null\nsleep 5\n"),
    # set up to run outside its workspace: the security rules refuse it at each run, as a misplaced hook is
    "demo-misplaced": ("turn_complete", "#!/bin/sh\ncat > /dev/null\n"),
}
#: Where the demo's hooks run, where not in their workspace.
CWD: Final = {"demo-misplaced": "../elsewhere"}
#: The demo worker's bounds: an outage's burst of errors overflows the pager's queue (its events are shed).
MAX_PROCS: Final = 4
QUEUE_SIZE: Final = 8
#: The timeouts of the demo's hooks; the pager always outlives its own.
TIMEOUT_MS: Final = {"demo-pager": 200}
DEFAULT_TIMEOUT_MS: Final = 5000


def write_workspace(folder: Path) -> Path:
    """hooks.json and its scripts in ``folder`` (private to this user)."""
    folder.chmod(0o700)
    hooks: dict[str, list[dict[str, object]]] = {}
    for hook_id, (event, text) in HOOKS.items():
        script = folder / f"{hook_id}.sh"
        script.write_text(text)
        script.chmod(0o700)
        timeout_ms = TIMEOUT_MS.get(hook_id, DEFAULT_TIMEOUT_MS)
        hook: dict[str, object] = {"id": hook_id, "command": str(script), "stdin_json": True, "timeout_ms": timeout_ms}
        if hook_id in CWD:
            hook["cwd"] = CWD[hook_id]
        hooks.setdefault(event, []).append(hook)
    (folder / "hooks.json").write_text(json.dumps({"hooks": hooks}))
    return folder


@contextlib.asynccontextmanager
async def demo_hooks(bus: Bus) -> AsyncIterator[ShellWorker]:
    """The demo's hooks running on ``bus`` while the block runs."""
    with tempfile.TemporaryDirectory(prefix="hookbus-demo-hooks-") as name:
        workspace = write_workspace(Path(name))
        settings = WorkerSettings(
            queue=f"hookbus-demo-hooks-{random_hex(6)}", max_procs=MAX_PROCS, queue_size=QUEUE_SIZE
        )
        async with ShellWorker(bus, workspace, settings) as worker:
            yield worker
