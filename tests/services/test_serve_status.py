"""`hookbus serve FILE[:NAME]`, `hookbus status` and presence, and `hookbus tail` on an idle bus, as real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import msgspec
import orjson
import pytest

from bus import Bus, Cancel, Continue, Module, NatsServer, Stage
from bus._core.errors import RegistryError
from bus._presence import PresenceMsg, component, open_presence, presence
from tests.cli.test_cli import UpProcess
from tests.conftest import hookbus_cmd, run_cli, shipped_permissions, unique
from tests.support.hooks_support import write_hooks

GUARD = """
from bus import Cancel, Continue, Module, Stage

module = Module({name!r})


@module.stage(Stage.TOOL_CALL, fail_closed=True, match="shell")
async def no_rm(stage: str, payload: dict) -> Cancel | Continue:
    if "rm -rf" in payload.get("input", {{}}).get("command", ""):
        return Cancel({reason!r})
    return Continue()
"""


class Lines:
    """A child process's stdout, read line by line in a thread, waited on with a bound."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [*hookbus_cmd(), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        self.lines: list[str] = []

    async def next_line(self, timeout: float = 30.0) -> str:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), timeout)
        if not line:
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"the process ended (lines so far {self.lines}): {stderr}")
        self.lines.append(line.rstrip("\n"))
        return self.lines[-1]

    def stop(self) -> tuple[int, str, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def guard_file(tmp_path: Path) -> tuple[Path, str]:
    """A guard module file of a fresh module name (trust records outlive a test on a module-scoped server)."""
    name = unique("guard")
    path = tmp_path / "guard.py"
    path.write_text(GUARD.format(name=name, reason="only by hand"))
    return path, name


async def test_serve_says_what_it_serves_then_approved_and_stops_cleanly(
    nats_url: str, guard_file: tuple[Path, str]
) -> None:
    path, name = guard_file
    serve = Lines("serve", str(path), env={"NATS_URL": nats_url})
    try:
        assert await serve.next_line() == f"hookbus serve: {path} on {nats_url}"
        assert await serve.next_line() == f"serving {name}.no_rm on tool.call (fail-closed), waiting for approval"
        approved = await asyncio.to_thread(run_cli, "approve", f"{name}.no_rm", env={"NATS_URL": nats_url})
        assert approved.returncode == 0, approved.stderr
        assert await serve.next_line() == f"approved {name}.no_rm"
        async with Bus(nats_url) as kernel:
            await kernel.middleware.start()
            decision = await kernel.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "rm -rf /"}})
        assert decision == Cancel("only by hand", f"{name}.no_rm")
        code, out, _ = serve.stop()
        assert code == 0 and out.strip().endswith("hookbus serve: stopped")
    finally:
        serve.close()
    detached = await asyncio.to_thread(run_cli, "detach", name, env={"NATS_URL": nats_url})
    assert detached.returncode == 0, detached.stderr  # its fail-closed guard stayed in force until now
    status = await asyncio.to_thread(run_cli, "status", "--json", env={"NATS_URL": nats_url})
    assert name not in [m["name"] for m in orjson.loads(status.stdout)["modules"]], "it left the registry"


async def test_serve_dev_serves_a_changed_file_again(nats_url: str, guard_file: tuple[Path, str]) -> None:
    path, name = guard_file
    serve = Lines("serve", f"{path}:module", "--dev", env={"NATS_URL": nats_url})
    try:
        await serve.next_line()
        assert await serve.next_line() == f"serving {name}.no_rm on tool.call (fail-closed), waiting for approval"
        approved = await asyncio.to_thread(run_cli, "approve", f"{name}.no_rm", env={"NATS_URL": nats_url})
        assert approved.returncode == 0, approved.stderr
        assert await serve.next_line() == f"approved {name}.no_rm"
        path.write_text(GUARD.format(name=name, reason="never, not even by hand"))
        assert await serve.next_line() == f"hookbus serve: {path} changed: serving it again"
        assert await serve.next_line() == (
            f"serving {name}.no_rm on tool.call (fail-closed), changed since its approval, waiting for approval"
        )
        path.write_text("def broken(:\n")
        assert serve.proc.stderr is not None
        error = await asyncio.wait_for(asyncio.to_thread(serve.proc.stderr.readline), 30)
        assert error.startswith(f"hookbus serve: {path}: SyntaxError")
        assert error.rstrip().endswith("still serving the last good version")
        async with Bus(nats_url) as kernel:  # the last good version answers, once approved as it is
            approved = await asyncio.to_thread(run_cli, "approve", f"{name}.no_rm", env={"NATS_URL": nats_url})
            assert approved.returncode == 0, approved.stderr
            await kernel.middleware.start()
            decision = await kernel.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "rm -rf /"}})
        assert decision == Cancel("never, not even by hand", f"{name}.no_rm")
        code, _, _ = serve.stop()
        assert code == 0
    finally:
        serve.close()
    await asyncio.to_thread(run_cli, "detach", name, env={"NATS_URL": nats_url})


@pytest.mark.parametrize(
    ("source", "target", "message"),
    [
        ("x = 1\n", "", "must define one bus.Module at top level (found none)"),
        (
            "from bus import Module\na = Module('a1')\nb = Module('b1')\n",
            "",
            "must define one bus.Module at top level (found several: a, b; pick one with",
        ),
        ("from bus import Module\na = Module('a1')\n", ":b", "'b' is not a bus.Module (it is NoneType)"),
        ("raise RuntimeError('no config')\n", "", ": RuntimeError: no config"),
    ],
)
def test_serve_refuses_a_file_it_cannot_serve_in_one_line(
    tmp_path: Path, source: str, target: str, message: str
) -> None:
    path = tmp_path / "mod.py"
    path.write_text(source)
    done = run_cli("serve", f"{path}{target}", env={"NATS_URL": "nats://127.0.0.1:1"})
    assert done.returncode == 1
    assert done.stderr.startswith(f"hookbus: error: {path}") and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    missing = run_cli("serve", str(tmp_path / "nope.py"))
    assert missing.stderr.strip() == f"hookbus: error: {tmp_path / 'nope.py'}: no such file"


async def test_status_lists_processes_modules_and_handlers_with_versions(nats_url: str, workspace: Path) -> None:
    write_hooks(workspace, {"tool_call": [{"command": "/bin/true"}]})
    worker = Lines("worker", "--workspace", str(workspace), "--queue", unique("q"), env={"NATS_URL": nats_url})
    name = unique("mod")
    module = Module(name)

    @module.stage(Stage.TOOL_CALL, fail_closed=True)
    async def check(stage: str, payload: dict[str, object]) -> Continue:
        return Continue()

    try:
        assert "ready" in await worker.next_line()
        async with Bus(nats_url) as bus:
            ready = asyncio.Event()
            serving = asyncio.create_task(module.serve(bus=bus, ready=ready, detach_on_stop=True))
            try:
                await asyncio.wait_for(ready.wait(), 15)
                done = await asyncio.to_thread(run_cli, "status", "--json", env={"NATS_URL": nats_url})
                text = await asyncio.to_thread(run_cli, "status", env={"NATS_URL": nats_url})
            finally:
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
        assert done.returncode == 0, done.stderr
        status = orjson.loads(done.stdout)
        assert status["nats"] == nats_url
        [mine] = [row for row in status["worker"] if str(workspace) in row["detail"]]
        assert mine["process"] == "hookbus worker" and mine["version"] and mine["last_seen_s"] < 60
        assert mine["where"].endswith(f":{worker.proc.pid}")
        [listed] = [m for m in status["modules"] if m["name"] == name]
        assert len(listed["instances"]) == 1 and len(listed["instances"][0]["version"]) == 16
        assert listed["handlers"] == [
            {"name": f"{name}.check", "stage": "tool.call", "fail_closed": True, "state": "untrusted", "runs": False}
        ]
        lines = text.stdout.splitlines()
        assert lines[0] == f"on {nats_url}:"
        assert f"    {name}.check  on tool.call  fail-closed  untrusted: waiting for approval" in lines
        for heading in ("agents", "workers", "modules", "trigger engines", "journal sinks"):
            assert heading in lines
        code, _, _ = worker.stop()
        assert code == 0
    finally:
        worker.close()
    after = await asyncio.to_thread(run_cli, "status", "--json", env={"NATS_URL": nats_url})
    assert not [row for row in orjson.loads(after.stdout)["worker"] if str(workspace) in row["detail"]]


async def test_status_ignores_a_presence_record_under_another_key(nats_url: str) -> None:
    async with Bus(nats_url) as bus:
        kv = await open_presence(bus)
        forged = PresenceMsg(
            user="bus",
            instance="aaaaaaaaaaaa",
            process="hookbus up",
            version="9.9",
            host="h",
            pid=1,
            heartbeat=5.0,
            started=time.time(),
            at=time.time(),
            components=[],
        )
        key = f"worker.{unique('x')}"
        await kv.put(key, msgspec.json.encode(forged))
        await kv.put(f"worker.{unique('y')}", b"not json")
        done = await asyncio.to_thread(run_cli, "status", "--json", env={"NATS_URL": nats_url})
        await kv.delete(key)
    problems = orjson.loads(done.stdout)["problems"]
    assert f"presence record {key!r} claims to be bus.aaaaaaaaaaaa: ignored" in problems
    assert any("is not JSON" in problem for problem in problems)


@pytest.mark.timeout(300)  # a hookbus up, five idle seconds, a tail
async def test_tail_on_an_idle_bus_prints_nothing_then_the_next_event(tmp_path: Path) -> None:
    """Five seconds of an idle bus (presence, registry heartbeats, JetStream: only internal traffic), then a marker."""
    up = UpProcess(tmp_path / "ws")
    module = Module(unique("idle"))

    @module.stage(Stage.TOOL_CALL)
    async def check(stage: str, payload: dict[str, object]) -> Continue:
        return Continue()

    tail = Lines("tail", "--count", "1", env={"NATS_URL": up.nats_url})
    try:
        async with Bus(up.nats_url) as bus:
            ready = asyncio.Event()
            serving = asyncio.create_task(module.serve(bus=bus, ready=ready))  # a KV heartbeat every second
            try:
                await asyncio.wait_for(ready.wait(), 15)
                assert tail.proc.stderr is not None
                banner = await asyncio.wait_for(asyncio.to_thread(tail.proc.stderr.readline), 30)
                assert banner.startswith("tailing > on ")
                await asyncio.sleep(5)  # the idle period under test, not a wait for something
                await bus.emit("eva.custom.marker", {"n": 1})
                line = await tail.next_line()
            finally:
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
        out, err = tail.proc.communicate(timeout=30)
        assert tail.proc.returncode == 0
        assert "eva.custom.marker depth=0" in line and '{"n":1}' in line
        assert out == "", "nothing after the marker either"
        assert err == "", f"no warnings about internal traffic: {err}"
    finally:
        tail.close()
        up.close()


async def test_presence_under_the_shipped_permissions_each_user_its_own_keys(tmp_path: Path) -> None:
    with NatsServer(config_file=shipped_permissions(tmp_path), jetstream=False) as server:

        def url(user: str) -> str:
            return f"nats://{user}:change-me-{user}@127.0.0.1:{server.port}"

        async with (
            Bus(url("bus")) as up,
            presence(up, "hookbus up", [component("bus", "nats", "test")]),
            Bus(url("worker")) as worker,
            presence(worker, "hookbus worker", [component("worker", "w")]),
        ):
            done = await asyncio.to_thread(run_cli, "status", "--json", env={"NATS_URL": url("operator")})
            kv = await open_presence(worker)
            with pytest.raises(RegistryError):
                await kv.put("bus.forged", b"{}")  # another user's key: denied
        assert done.returncode == 0, done.stderr
        status = orjson.loads(done.stdout)
        assert [(row["user"], row["process"]) for row in status["bus"]] == [("bus", "hookbus up")]
        assert [(row["user"], row["process"]) for row in status["worker"]] == [("worker", "hookbus worker")]
        assert status["problems"] == []
