"""``hookbus mcp install``: --write merges the entry into each client's real config file (temp files), keeping
what is there and refusing to clobber an entry of the same name without --force; --client agents-sdk prints
Python that the SDK runs.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import orjson

from tests.conftest import run_cli

SERVER = ["--", "npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"]


def _install(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = run_cli("mcp", "install", *args, env=env)
    return done.returncode, done.stdout, done.stderr


def test_write_merges_into_a_json_clients_file_and_refuses_to_clobber(tmp_path: Path) -> None:
    for client, file in (("claude-code", tmp_path / ".mcp.json"), ("cursor", tmp_path / ".cursor" / "mcp.json")):
        file.parent.mkdir(exist_ok=True)
        theirs = {"mcpServers": {"github": {"command": "gh-mcp"}, "fs": {"command": "old"}}, "other": [1, 2]}
        file.write_bytes(orjson.dumps(theirs))
        code, _, err = _install("--client", client, "--name", "fs", "--write", str(file), *SERVER)
        assert code != 0 and "already has an MCP server named 'fs'" in err and "--force" in err
        assert orjson.loads(file.read_bytes()) == theirs, "refused: the file untouched"
        code, _, err = _install("--client", client, "--name", "files", "--write", str(file), *SERVER)
        assert code == 0, err
        merged = orjson.loads(file.read_bytes())
        assert merged["other"] == [1, 2] and merged["mcpServers"]["github"] == {"command": "gh-mcp"}
        assert merged["mcpServers"]["files"]["args"][-7:] == ["--name", "files", *SERVER]
        assert ("type" in merged["mcpServers"]["files"]) == (client == "claude-code")
        code, _, err = _install("--client", client, "--name", "fs", "--force", "--write", str(file), *SERVER)
        assert code == 0, err
        assert orjson.loads(file.read_bytes())["mcpServers"]["fs"]["args"][-4:] == SERVER[1:]


def test_write_creates_a_missing_file_and_refuses_one_that_is_not_json(tmp_path: Path) -> None:
    fresh = tmp_path / "new" / ".mcp.json"
    assert _install("--client", "claude-code", "--write", str(fresh), *SERVER)[0] == 0
    assert list(orjson.loads(fresh.read_bytes())["mcpServers"]) == ["npx"]
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    code, _, err = _install("--client", "cursor", "--write", str(broken), *SERVER)
    assert code != 0 and "not JSON" in err and broken.read_text(encoding="utf-8") == "{not json"


def test_write_appends_a_codex_table_keeping_the_file_and_force_replaces_it(tmp_path: Path) -> None:
    home = tmp_path / "codex"
    home.mkdir()
    config = home / "config.toml"
    theirs = (
        'model = "o3"  # a comment kept\n\n[mcp_servers.fs]\ncommand = "old"\nargs = []\n\n'
        '[mcp_servers.fs.env]\nKEY = "v"\n\n[mcp_servers.github]\ncommand = "gh-mcp"\n'
    )
    config.write_text(theirs, encoding="utf-8")
    env = {"CODEX_HOME": str(home)}
    code, _, err = _install("--client", "codex", "--name", "fs", "--write", *SERVER, env=env)
    assert code != 0 and "already has an MCP server named 'fs'" in err
    assert config.read_text(encoding="utf-8") == theirs
    assert _install("--client", "codex", "--name", "files", "--write", *SERVER, env=env)[0] == 0
    text = config.read_text(encoding="utf-8")
    assert text.startswith(theirs.rstrip("\n")), "what was there stays byte for byte"
    parsed = tomllib.loads(text)
    assert parsed["model"] == "o3" and parsed["mcp_servers"]["github"]["command"] == "gh-mcp"
    assert parsed["mcp_servers"]["files"]["args"][-4:] == SERVER[1:]
    assert _install("--client", "codex", "--name", "fs", "--force", "--write", *SERVER, env=env)[0] == 0
    replaced = tomllib.loads(config.read_text(encoding="utf-8"))
    assert replaced["mcp_servers"]["fs"]["args"][-4:] == SERVER[1:] and "env" not in replaced["mcp_servers"]["fs"]
    assert set(replaced["mcp_servers"]) == {"fs", "files", "github"} and replaced["model"] == "o3"


def test_agents_sdk_snippet_is_python_naming_the_sdks_objects() -> None:
    import ast

    import agents.mcp

    from bus.adapters import openai_agents

    code, out, err = _install("--client", "agents-sdk", "--name", "fs", *SERVER)
    assert code == 0, err
    compile(out, "<snippet>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    assert "MCPServerStdio(params={'command': 'npx', 'args': ['-y', '@modelcontextprotocol/server-filesystem'" in out
    assert "guard_mcp_calls(server, bus)" in out and hasattr(openai_agents, "guard_mcp_calls")
    code, out, _ = _install("--client", "agents-sdk", "--name", "remote", "--url", "http://127.0.0.1:9/mcp")
    assert code == 0 and "MCPServerStreamableHttp(params={'url': 'http://127.0.0.1:9/mcp'}" in out
    assert hasattr(agents.mcp, "MCPServerStreamableHttp") and hasattr(agents.mcp, "MCPServerStdio")
    code, _, err = _install("--client", "agents-sdk", "--write", "x.py", *SERVER)
    assert code != 0 and "agents-sdk" in err
