"""``hookbus mcp`` in front of PyPI's reference git server (mcp-server-git) on a temporary repository:
tools/list filtered by tool.list, a guarded call refused before the server sees it, the others passing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from bus import Cancel, Continue, Decision, Module
from bus.testing import serving
from tests.adapters.mcp_support import git_server, over_stdio, proxy_env, text_of
from tests.adapters.test_mcp import trusted
from tests.conftest import require_binary, unique


def git_guard(name: str) -> Module:
    """No git_reset listed; git_add refused for anything under secrets/."""
    module = Module(name)

    @module.stage("tool.list", match="mcp__git__git_reset")
    async def unlisted(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("resetting is not for agents")

    @module.stage("tool.call", fail_closed=True, match="mcp__git__git_add")
    async def adds(stage: str, payload: dict[str, Any]) -> Decision:
        files = payload["input"].get("files", [])
        return Cancel("no secrets staged") if any(str(f).startswith("secrets/") for f in files) else Continue()

    return module


def repository(root: Path) -> Path:
    git = require_binary("git")
    repo = root / "repo"
    (repo / "secrets").mkdir(parents=True)
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"], ["config", "user.name", "t"]):
        subprocess.run([git, *args], cwd=repo, check=True)
    (repo / "readme.txt").write_text("hello\n")
    (repo / "secrets" / "key.txt").write_text("hunter2\n")
    return repo


def staged(repo: Path) -> list[str]:
    done = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=repo, check=True, capture_output=True)
    return done.stdout.decode().split()


async def test_the_git_server_listed_filtered_and_a_call_guarded(nats_url: str, tmp_path: Path) -> None:
    repo, name = repository(tmp_path), unique("mcpgit")
    env = proxy_env(nats_url, tmp_path / "state")
    async with serving(git_guard(name), nats_url, detach_on_stop=True):
        await trusted(nats_url, name, {"tool.list": ["unlisted"], "tool.call": ["adds"]})
        async with over_stdio(env, "--name", "git", "--", git_server(), "--repository", str(repo)) as session:
            listed = {tool.name for tool in (await session.list_tools()).tools}
            refused = await session.call_tool("git_add", {"repo_path": str(repo), "files": ["secrets/key.txt"]})
            assert staged(repo) == [], "refused before the server saw it"
            added = await session.call_tool("git_add", {"repo_path": str(repo), "files": ["readme.txt"]})
            status = await session.call_tool("git_status", {"repo_path": str(repo)})
    assert {"git_status", "git_add", "git_diff_staged"} <= listed and "git_reset" not in listed
    assert refused.is_error and "no secrets staged" in text_of(refused)
    assert not added.is_error and staged(repo) == ["readme.txt"]
    assert not status.is_error and "readme.txt" in text_of(status)
