"""Claude Code on the bus under deploy/nats/permissions.conf as shipped, each part as its own user.

The relay and the claude-hooks.json module run as ``bus`` (what ``hookbus up``
connects as), the guard as ``module-guard``, the hook command as
``agent-eva``; a ``worker`` may not ask the relay.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus import Bus, Cancel, NatsServer
from bus._middleware.registry import ensure_buckets
from bus.adapters.claude_code.command_modules import MODULE, ClaudeHooksServer
from bus.adapters.claude_code.relay import Relay
from bus.testing import serving, wait_for_chain
from tests.adapters.test_claude_code import bash, claude_hook, denial, env_for, guard
from tests.conftest import as_user, shipped_server


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "cc-permissions")


async def test_the_relay_and_the_claude_hooks_module_work_as_the_shipped_users(
    shipped: NatsServer, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "deny.py").write_text("import sys\nprint('no deploys from here', file=sys.stderr)\nsys.exit(2)\n")
    hooks = {
        "PreToolUse": [{"matcher": "Deploy", "hooks": [{"type": "command", "command": f"{sys.executable} deny.py"}]}]
    }
    (workspace / "claude-hooks.json").write_text(json.dumps({"hooks": hooks}))
    async with Bus(as_user(shipped, "bus"), name="hookbus-up") as bus:
        await ensure_buckets(bus.port)
        claude_hooks = ClaudeHooksServer(bus, workspace, None)
        await claude_hooks.start()
        relay = Relay(bus)
        try:
            async with serving(guard("guard"), as_user(shipped, "module-guard"), detach_on_stop=True):
                async with Bus(as_user(shipped, "operator"), trust_new=True) as operator:  # approves on first sight
                    await wait_for_chain(operator, "tool.call", ["claude-hooks.PreToolUse", "guard.no_rm"])
                await relay.start()
                agent = env_for(as_user(shipped, "agent-eva"), tmp_path)
                code, output, stderr = await claude_hook(bash("rm -rf /"), agent)
                assert code == 0 and denial(output) == "hookbus (guard.no_rm): only by hand", stderr

                worker = env_for(as_user(shipped, "worker"), tmp_path / "worker")
                code, output, stderr = await claude_hook(bash("rm -rf /"), worker)
                assert code == 1 and output is None, "a worker may not ask the relay: no decision"
                assert 'Permissions Violation for Publish to "hookbus.adapter.claude-code.worker"' in stderr

                async with Bus(as_user(shipped, "agent-eva")) as kernel:
                    await wait_for_chain(kernel, "tool.call", [f"{MODULE}.PreToolUse", "guard.no_rm"])
                    decision = await kernel.intercept("tool.call", {"name": "Deploy", "input": {}})
                    assert isinstance(decision, Cancel) and decision.reason == "no deploys from here"
        finally:
            await relay.stop()
            await claude_hooks.stop()
