"""`hookbus demo` against a running `hookbus up`: every part moves and the journal shows it."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.cli.test_cli import UpProcess
from tests.conftest import run_cli
from tests.support.waiting import wait_until


async def test_demo_moves_every_part(workspace: Path) -> None:
    up = UpProcess(workspace)
    try:
        done = run_cli(
            "demo", "--pace", "0", "--seed", "11", "--sessions", "10", env={"NATS_URL": up.nats_url}, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert "sessions 10" in done.stdout and "cancelled" in done.stdout

        def journal(*args: str) -> list[dict[str, object]]:
            out = run_cli("journal", "--workspace", str(workspace), "--json", *args).stdout
            return [orjson.loads(line) for line in out.splitlines()]

        await wait_until(lambda: any(e["decision"] == "fired" for e in journal("--kind", "trigger")), timeout=30)
        cancels = journal("--kind", "middleware", "--decision", "cancel")
        assert cancels and all(e["who"] == "demo-guard.no_rm" and e["session"] for e in cancels)
        assert {e["decision"] for e in journal("--kind", "trigger")} == {"fired", "suppressed"}
    finally:
        up.close()
