"""hooks.json validation: what is accepted, and errors that name file, entry and field."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bus._core.errors import ConfigError
from subscribers.shell_hooks._errors import HookConfigError
from subscribers.shell_hooks._hooks_config import HooksConfig, parse_api_hook, parse_config

PRX_EXAMPLE = {
    "hooks": {
        "agent_start": [
            {
                "command": "/usr/local/bin/notify",
                "args": ["--channel", "ops", "--title", "Agent Started"],
                "timeout_ms": 3000,
            }
        ],
        "llm_response": [
            {"command": "python3", "args": ["/opt/hooks/log_latency.py"], "stdin_json": True, "timeout_ms": 2000}
        ],
        "tool_call": [
            {"command": "/opt/hooks/audit_tool_usage.sh", "env": {"LOG_DIR": "/var/log/prx/audit"}, "timeout_ms": 5000}
        ],
        "error": [
            {
                "command": "curl",
                "args": ["-X", "POST", "-H", "Content-Type: application/json", "-d", "@-", "https://example.invalid/x"],
                "stdin_json": True,
                "timeout_ms": 10000,
            }
        ],
    }
}


def parse(obj: Any) -> HooksConfig:
    return parse_config(orjson.dumps(obj), "/ws/hooks.json")


def test_the_prx_example_parses_with_defaults_and_stable_ids() -> None:
    config = parse(PRX_EXAMPLE)
    assert [entry.pattern for entry in config.entries] == [
        "prx.lifecycle.agent_start",
        "prx.lifecycle.llm_response",
        "prx.lifecycle.tool_call",
        "prx.lifecycle.error",
    ]
    assert all(entry.enabled and entry.refused is None for entry in config.entries)
    assert config.entries[2].action.stdin_json is False
    assert config.entries[2].action.args == ()
    assert [e.id for e in parse(PRX_EXAMPLE).entries] == [e.id for e in config.entries]
    assert parse(orjson.loads(config.to_json_bytes())) == config


@pytest.mark.parametrize(
    ("doc", "entry", "field"),
    [
        ({"hooks": {"tool_call": [{"command": "x", "timeout_ms": "5"}]}}, "hooks.tool_call[0]", "timeout_ms"),
        ({"hooks": {"tool_call": [{"command": "x", "timeout_ms": True}]}}, "hooks.tool_call[0]", "timeout_ms"),
        ({"hooks": {"tool_call": [{"command": "x", "args": "a"}]}}, "hooks.tool_call[0]", "args"),
        ({"hooks": {"tool_call": [{"command": "x", "env": {"A": 1}}]}}, "hooks.tool_call[0]", "env"),
        ({"hooks": {"tool_call": [{"command": "x", "stdin_json": "yes"}]}}, "hooks.tool_call[0]", "stdin_json"),
        ({"hooks": {"tool_call": [{"command": "x", "shell": True}]}}, "hooks.tool_call[0]", "shell"),
        ({"hooks": {"tool_call": [{}, {"args": []}]}}, "hooks.tool_call[0]", "command"),
        ({"hooks": {"tool_call": [{"command": 1}]}}, "hooks.tool_call[0]", "command"),
        ({"hooks": {"tool_call": [{"command": "x", "enabled": "no"}]}}, "hooks.tool_call[0]", "enabled"),
        ({"hooks": {"tool_call": {"command": "x"}}}, "hooks.tool_call", None),
        ({"hooks": {"bad key!": []}}, "hooks.bad key!", None),
        ({"hooks": []}, None, "hooks"),
        ({"hooks": {}, "extra": 1}, None, "extra"),
    ],
)
def test_errors_name_file_entry_and_field(doc: Any, entry: str | None, field: str | None) -> None:
    with pytest.raises(HookConfigError) as caught:
        parse(doc)
    error = caught.value
    assert isinstance(error, ConfigError)
    assert (error.file, error.entry, error.field) == ("/ws/hooks.json", entry, field)
    assert str(error).startswith("/ws/hooks.json: ")


def test_bad_json_names_the_file() -> None:
    with pytest.raises(HookConfigError, match=r"^/ws/hooks.json: not valid JSON"):
        parse_config(b'{"hooks": ', "/ws/hooks.json")


def test_security_problems_refuse_the_entry_not_the_file() -> None:
    config = parse({"hooks": {"tool_call": [{"command": "a;b"}, {"command": "ok"}]}})
    assert config.entries[0].refused is not None
    assert "metacharacters" in config.entries[0].refused
    assert config.entries[1].refused is None


def test_duplicate_explicit_ids_are_an_error_identical_entries_are_numbered() -> None:
    with pytest.raises(HookConfigError, match="duplicate id"):
        parse({"hooks": {"a": [{"id": "h1", "command": "x"}], "b": [{"id": "h1", "command": "y"}]}})
    config = parse({"hooks": {"a": [{"command": "x"}, {"command": "x"}]}})
    assert config.entries[1].id == config.entries[0].id + "-2"


def test_api_writes_are_stricter_refused_actions_are_errors() -> None:
    with pytest.raises(HookConfigError, match="refused: command contains shell metacharacters"):
        parse_api_hook({"event": "tool_call", "action": {"command": "a|b"}}, hook_id="h")
    with pytest.raises(HookConfigError) as caught:
        parse_api_hook({"event": "tool_call", "action": {"command": "a", "timeout_ms": -1}}, hook_id="h")
    assert (caught.value.entry, caught.value.field) == ("action", "timeout_ms")
    entry = parse_api_hook({"event": "eva.custom.deploy", "action": {"command": "a"}}, hook_id="h")
    assert entry.to_api()["action"] == {"command": "a", "args": [], "timeout_ms": 30000, "stdin_json": False}


@pytest.mark.parametrize(
    ("body", "name"), [(None, "null"), (True, "boolean"), ([], "array"), ("x", "string"), (1, "number")]
)
def test_api_body_that_is_not_an_object_is_named_by_its_json_type(body: object, name: str) -> None:
    with pytest.raises(HookConfigError, match=f"expected a JSON object, got {name}$"):
        parse_api_hook(body, hook_id="h")
