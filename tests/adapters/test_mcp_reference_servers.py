"""``hookbus mcp`` in front of reference servers: PyPI's mcp-server-git on a temporary repository, and npm's
server-everything (tools, resources, resource templates, prompts): tools/list filtered by tool.list, guarded calls
refused before the server sees them, resources/read on resource.read, everything else passing unchanged.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

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


DOCS = "demo://resource/static/document"


def everything_guard(name: str) -> Module:
    """get-env not listed (nor callable); echo of a password refused; one resource refused on resource.read."""
    module = Module(name)

    @module.stage("tool.list", match="mcp__everything__get-env")
    async def hidden(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("the environment is not for agents")

    @module.stage("tool.call", fail_closed=True)
    async def calls(stage: str, payload: dict[str, Any]) -> Decision:
        if payload["name"] == "mcp__everything__get-env":
            return Cancel("the environment is not for agents")
        return Cancel("no passwords") if "password" in str(payload["input"]) else Continue()

    @module.stage("resource.read")
    async def reads(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("not that one") if str(payload["uri"]).endswith("/architecture.md") else Continue()

    return module


async def test_the_everything_server_tools_resources_and_prompts_through_the_proxy(
    nats_url: str, tmp_path: Path
) -> None:
    from mcp.shared.exceptions import MCPError

    from tests.adapters.mcp_support import everything_server

    name = unique("mcpall")
    env = proxy_env(nats_url, tmp_path / "state")
    async with serving(everything_guard(name), nats_url, detach_on_stop=True):
        await trusted(nats_url, name, {"tool.list": ["hidden"], "tool.call": ["calls"], "resource.read": ["reads"]})
        async with over_stdio(env, "--name", "everything", "--", *everything_server()) as session:
            listed = {tool.name for tool in (await session.list_tools()).tools}
            echoed = await session.call_tool("echo", {"message": "hi"})
            refused = await session.call_tool("echo", {"message": "my password is x"})
            env_call = await session.call_tool("get-env", {})
            summed = await session.call_tool("get-sum", {"a": 2, "b": 3})
            resources = (await session.list_resources()).resources
            prompts = (await session.list_prompts()).prompts
            templates = (await session.list_resource_templates()).resource_templates
            prompt = await session.get_prompt("simple-prompt", {})
            read = await session.read_resource(f"{DOCS}/features.md")
            dynamic = await session.read_resource("demo://resource/dynamic/text/2")
            with pytest.raises(MCPError) as refusal:
                await session.read_resource(f"{DOCS}/architecture.md")
    assert "echo" in listed and "get-sum" in listed and "get-env" not in listed
    assert not echoed.is_error and "hi" in text_of(echoed)
    assert refused.is_error and "no passwords" in text_of(refused)
    assert env_call.is_error and "the environment is not for agents" in text_of(env_call)
    assert not summed.is_error and "5" in text_of(summed)
    assert {"simple-prompt", "args-prompt"} <= {p.name for p in prompts} and prompt.messages, "prompts pass"
    assert f"{DOCS}/architecture.md" in {str(r.uri) for r in resources}, "resources/list passes unchanged"
    assert "demo://resource/dynamic/text/{resourceId}" in {t.uri_template for t in templates}
    assert read.contents and dynamic.contents
    assert "not that one" in str(refusal.value)
