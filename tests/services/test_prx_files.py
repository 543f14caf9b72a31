"""PRX's hooks.json shapes: read as PRX reads them, reloaded on a content change, written back in their own shape.

The fixtures are written here in the shapes PRX's loader accepts and its hooks
API writes (top-level ``enabled`` and ``timeout_ms``, every action field
present with ``null`` for the defaults, ``stdin_json: true``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus
from bus._runtime.filewatch import FileVersion
from subscribers.shell_hooks._errors import HookConfigError
from subscribers.shell_hooks._hooks_config import HooksConfig, parse_config
from subscribers.shell_hooks._hooks_store import HooksStore
from tests.conftest import StartWorker
from tests.support.hooks_support import script, wait_for_file, wait_until

FILE = "/ws/hooks.json"


def prx_action(command: str, *args: str, timeout_ms: int | None = None) -> dict[str, Any]:
    """An action as PRX's hooks API writes it: every field, nulls for the defaults."""
    return {
        "command": command,
        "args": list(args),
        "env": {},
        "cwd": None,
        "timeout_ms": timeout_ms,
        "stdin_json": True,
    }


#: A hooks.json as PRX's API leaves it: the top-level switches present and null.
PRX_WRITTEN: dict[str, Any] = {
    "enabled": None,
    "timeout_ms": None,
    "hooks": {
        "tool_call": [prx_action("./audit.sh"), prx_action("./slow.sh", "--quiet", timeout_ms=1500)],
        "agent_end": [prx_action("./bye.sh")],
    },
}


def parse(doc: Any) -> HooksConfig:
    return parse_config(orjson.dumps(doc), FILE)


def test_the_file_prx_s_api_writes_is_read_with_null_as_the_default() -> None:
    config = parse(PRX_WRITTEN)
    audit, slow, bye = config.entries
    assert (audit.pattern, slow.pattern, bye.pattern) == (
        "prx.lifecycle.tool_call",
        "prx.lifecycle.tool_call",
        "prx.lifecycle.agent_end",
    )
    assert audit.action.timeout_ms == 30_000, "null: the documented default"
    assert slow.action.timeout_ms == 1500
    assert audit.action.cwd is None and dict(audit.action.env) == {} and audit.action.stdin_json is True
    assert slow.action.args == ("--quiet",)
    assert config.enabled and all(entry.enabled and entry.refused is None for entry in config.entries)
    assert config.warnings == ()


def test_top_level_timeout_is_the_default_of_actions_that_give_none() -> None:
    doc = {**PRX_WRITTEN, "timeout_ms": 1200, "hooks": {**PRX_WRITTEN["hooks"], "error": [{"command": "./plain.sh"}]}}
    config = parse(doc)
    assert [entry.action.timeout_ms for entry in config.entries] == [1200, 1500, 1200, 1200]
    assert config.timeout_ms == 1200


def test_the_top_level_switch_turns_every_hook_off_and_null_means_on() -> None:
    off = parse({**PRX_WRITTEN, "enabled": False})
    assert not off.enabled
    assert off.runnable_by_pattern() == {} and off.matching("prx.lifecycle.tool_call") == []
    assert all(entry.enabled for entry in off.entries), "each hook keeps its own switch"
    on = parse({"enabled": True, "hooks": {"tool_call": [{"command": "./a.sh", "enabled": None}]}})
    assert list(on.runnable_by_pattern()) == ["prx.lifecycle.tool_call"]


@pytest.mark.parametrize(
    ("key", "event"),
    [
        ("Tool-Call-Start", "tool_call_start"),
        ("AGENT_END", "agent_end"),
        ("  tool_call  ", "tool_call"),
        ("\tLLM-Response\n", "llm_response"),
        (" eva.custom.deploy ", "eva.custom.deploy"),
    ],
)
def test_keys_are_normalised_as_prx_does_with_one_warning_naming_the_key(key: str, event: str) -> None:
    config = parse({"hooks": {key: [{"command": "./a.sh"}, {"command": "./b.sh"}]}})
    assert {entry.event for entry in config.entries} == {event}
    pattern = event if "." in event else f"prx.lifecycle.{event}"
    assert {entry.pattern for entry in config.entries} == {pattern}
    assert len(config.warnings) == 1
    assert repr(key) in config.warnings[0] and repr(event) in config.warnings[0] and FILE in config.warnings[0]


def test_subjects_keep_their_case_and_dashes_and_normal_keys_warn_nothing() -> None:
    config = parse({"hooks": {"eva.custom.Deploy-Now": [{"command": "./a.sh"}], "tool_call": [{"command": "./b.sh"}]}})
    assert [entry.pattern for entry in config.entries] == ["eva.custom.Deploy-Now", "prx.lifecycle.tool_call"]
    assert config.warnings == ()


@pytest.mark.parametrize(
    ("doc", "entry", "field"),
    [
        ({"timeout_ms": "5", "hooks": {}}, None, "timeout_ms"),
        ({"timeout_ms": 0, "hooks": {}}, None, "timeout_ms"),
        ({"enabled": "yes", "hooks": {}}, None, "enabled"),
        (
            {"hooks": {"Tool-Call": [{"command": "x"}, {"command": "y", "timeout_ms": 0}]}},
            "hooks.Tool-Call[1]",
            "timeout_ms",
        ),
        ({"hooks": {"AGENT_END": [{"command": "x", "stdin_json": None, "cwd": 3}]}}, "hooks.AGENT_END[0]", "cwd"),
        ({"hooks": {"tool_call": [{"command": "x", "env": {"A": None}}]}}, "hooks.tool_call[0]", "env"),
        ({"hooks": {"tool_call": [{"command": None}]}}, "hooks.tool_call[0]", "command"),
    ],
)
def test_errors_in_prx_shapes_name_file_key_index_and_field(doc: Any, entry: str | None, field: str) -> None:
    with pytest.raises(HookConfigError) as caught:
        parse(doc)
    assert (caught.value.file, caught.value.entry, caught.value.field) == (FILE, entry, field)


async def test_a_prx_file_with_a_normalised_key_runs_in_a_real_worker_and_warns_once(
    bus: Bus, workspace: Path, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    script(workspace, "audit.sh", f"cat > {workspace}/stdin\n")
    doc = {"enabled": None, "timeout_ms": None, "hooks": {"Tool-Call": [prx_action("./audit.sh")]}}
    (workspace / "hooks.json").write_bytes(orjson.dumps(doc))
    caplog.set_level(logging.WARNING, logger="hookbus.hooks")
    worker = await start_worker()
    assert worker.patterns == ["prx.lifecycle.tool_call"]
    await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})
    stdin = orjson.loads(await wait_for_file(workspace / "stdin"))  # stdin_json: true, as PRX's API writes
    assert stdin["event"] == "tool_call" and stdin["payload"] == {"tool": "shell"}
    warnings = [r.getMessage() for r in caplog.records if "'Tool-Call'" in r.getMessage()]
    assert len(warnings) == 1
    assert "'tool_call'" in warnings[0]


def rewrite_in_place_keeping_size_and_mtime(path: Path, old: bytes, new: bytes) -> None:
    """Overwrite ``path``'s bytes in place (same inode), then put its old mtime back."""
    assert len(old) == len(new)
    before = path.stat()
    with path.open("r+b") as handle:
        handle.write(new)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def test_a_version_is_its_content_not_its_size_or_mtime(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_bytes(b'{"hooks": {"tool_call": [{"command": "./one.sh"}]}}')
    version = FileVersion(path)
    assert version.changed() and not version.changed()
    os.utime(path, ns=(1, 1))  # touched: same content
    assert not version.changed()
    rewrite_in_place_keeping_size_and_mtime(path, path.read_bytes(), path.read_bytes().replace(b"one", b"two"))
    assert version.changed()
    assert version.data is not None and b"two.sh" in version.data


async def test_an_in_place_rewrite_with_the_old_mtime_is_reloaded(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    script(workspace, "mark.sh", f'echo "$1" >> {workspace}/marks\n')
    path = workspace / "hooks.json"
    old = orjson.dumps({"hooks": {"tool_call": [{"command": "./mark.sh", "args": ["one"]}]}})
    path.write_bytes(old)
    worker = await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(lambda: (workspace / "marks").exists() and "one" in (workspace / "marks").read_text())

    rewrite_in_place_keeping_size_and_mtime(path, old, old.replace(b'"one"', b'"two"'))
    await wait_until(lambda: worker.config.entries[0].action.args == ("two",), what="the reload")
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(lambda: (workspace / "marks").read_text().split() == ["one", "two"], what="the new hook")


def file_doc(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


async def test_api_writes_keep_a_prx_file_in_prx_s_shape(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_bytes(orjson.dumps(PRX_WRITTEN))
    store = HooksStore(path)

    toggled, by_prx_id = await store.toggle("tool_call:1")
    assert by_prx_id and not toggled.enabled
    created = await store.create({"event": "Tool-Call", "command": " ./new.sh ", "timeout_ms": 2000})
    assert created.event == "tool_call"
    await store.update("tool_call", {"timeout_ms": 3000, "command": None})
    await store.update("agent_end", {"event": "ERROR"})

    written = file_doc(path)
    assert {name: written[name] for name in ("enabled", "timeout_ms")} == {"enabled": None, "timeout_ms": None}
    assert written["hooks"] == {
        "tool_call": [
            {**prx_action("./audit.sh"), "timeout_ms": 3000},
            {**prx_action("./slow.sh", "--quiet", timeout_ms=1500), "enabled": False},
            prx_action("./new.sh", timeout_ms=2000),
        ],
        "error": [prx_action("./bye.sh")],
    }
    assert b'"id"' not in path.read_bytes() and b"_at" not in path.read_bytes()

    assert await store.delete("tool_call:1") is True
    assert [entry.action.command for entry in store.read().entries] == ["./audit.sh", "./new.sh", "./bye.sh"]


async def test_new_hooks_join_the_key_as_written_and_take_the_file_s_shape(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_bytes(orjson.dumps({"hooks": {"Tool-Call": [{"command": "./a.sh"}]}}))
    store = HooksStore(path)
    await store.create({"event": "tool_call", "command": "./b.sh"})
    assert list(file_doc(path)["hooks"]) == ["Tool-Call"]
    assert file_doc(path)["hooks"]["Tool-Call"][0] == {"command": "./a.sh"}, "an untouched entry stays as written"

    kept = tmp_path / "kept.json"  # a file in hookbus's shape: entries carry ids and timestamps
    kept.write_bytes(orjson.dumps({"hooks": {"tool_call": [{"id": "audit", "command": "./a.sh"}]}}))
    entry = await HooksStore(kept).create({"event": "tool_call", "command": "./b.sh"})
    written = file_doc(kept)["hooks"]["tool_call"][1]
    assert written["id"] == entry.id and written["created_at"] == entry.created_at is not None
    assert written["stdin_json"] is True
