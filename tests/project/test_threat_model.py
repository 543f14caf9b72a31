"""docs/security.md's threat model keeps up with the code: every test it names exists, and every bucket,
stream, HTTP route and workspace state name the code has is a row of its table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from subscribers.plugins._bus_services import BUCKET_PREFIX
from tests.core.test_subjects_one_place import NAMES

ROOT = Path(__file__).resolve().parents[2]
SECURITY = ROOT / "docs" / "security.md"


def _table() -> str:
    text = SECURITY.read_text()
    start = text.index("## Threat model")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_the_threat_model_names_exists() -> None:
    named = re.findall(r"`(tests/(?:\w+/)?test_\w+\.py)::(test_\w+)`", _table())
    assert len(named) > 30, "the table names the tests that run its attacks"
    missing = [f"{file}::{name}" for file, name in named if name not in _functions(ROOT / file)]
    assert missing == []


def test_every_bucket_and_stream_of_the_code_has_a_row() -> None:
    table = _table()
    names = [value for key, value in NAMES.items() if key.endswith(("_BUCKET", "_STREAM"))]
    assert len(names) >= 9
    missing = [name for name in [*names, f"{BUCKET_PREFIX}<name>"] if f"`{name}`" not in table]
    assert missing == []


def test_every_http_route_has_a_row() -> None:
    table = _table()
    routes: set[str] = set()
    for source in (ROOT / "subscribers" / "http_api").glob("*.py"):
        routes.update(re.findall(r"add_(?:get|post|put|delete)\(\s*\"([^\"]+)\"", source.read_text()))
    routes.update(
        re.findall(r"^PATH[^=]*= \"([^\"]+)\"", (ROOT / "bus/adapters/claude_code/_http_hook.py").read_text(), re.M)
    )
    assert len(routes) > 20
    missing = sorted(route for route in routes if f"`{route}`" not in table)
    assert missing == []


#: What hookbus reads from and writes to a workspace (each name written in the product, checked below).
WORKSPACE_STATE = (
    "hooks.json", "claude-hooks.json", "claude-plugins", "triggers.yaml", "budgets.yaml", "hook_turns.yaml",
    "history.yaml", "api-token", "ask-link-key", "asks.webhook", "hook-tokens", "plugins", "journal.db", "journal",
    "jetstream", "drain", "middleware.yaml",
)  # fmt: skip


def test_every_workspace_state_name_has_a_row() -> None:
    table = _table()
    product = "".join(
        path.read_text() for top in ("bus", "subscribers", "triggers") for path in (ROOT / top).rglob("*.py")
    )
    unused = [name for name in WORKSPACE_STATE if f'"{name}"' not in product]
    assert unused == [], "a name the product no longer uses: update the list and the table"
    missing = [name for name in WORKSPACE_STATE if f"`{name}" not in table]
    assert missing == []
