"""Handler records: identity, the restricted source, and the `hookbus records` / `hookbus runner` commands for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from bus import Bus, Cancel
from bus._core.errors import RecordError
from bus._middleware.kernel.approvals import approve
from bus._records.record import from_fields, parse_safely
from bus._records.sandbox import compile_record
from bus.testing import wait_for_chain
from tests.conftest import hookbus_cmd, run_cli, unique

SOURCE = """
async def handle(stage, payload, ctx):
    if "rm -rf" in payload.get("input", {}).get("command", ""):
        return Cancel("by hand")
    return Continue()
"""


def test_identity_is_of_the_normalised_record_and_changes_with_what_matters() -> None:
    one = from_fields({"name": "g", "stage": "tool.call", "source": SOURCE, "match": ["b", "a", "a"]})
    same = from_fields(
        {"name": "g", "stage": "tool.call", "source": SOURCE.replace("\n", "  \r\n"), "match": ["a", "b"]}
    )
    assert one.identity() == same.identity()  # line endings, trailing spaces, order and repeats do not count
    assert one.identity() != one.with_changes(enabled=False).identity()  # disabling waits for approval too
    assert one.identity() != one.with_changes(after=["other"]).identity()  # so does a reorder
    assert one.identity() != one.with_changes(source=SOURCE + "# more\n").identity()
    assert one.identity() == one.with_changes(note="informational", author="x").identity()
    assert one.identity("records") != one.identity("other")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "a b", "stage": "tool.call", "source": SOURCE}, "name"),
        ({"name": "g", "stage": "tool.call", "source": SOURCE, "fail_closed": "false"}, "fail_closed"),
        ({"name": "g", "stage": "tool.call", "source": SOURCE, "timeout": -1}, "timeout"),
        ({"name": "g", "stage": "tool.call", "source": "  "}, "source is empty"),
        ({"name": "g", "stage": "tool.call", "source": SOURCE, "before": ["a.b.c"]}, "reference"),
        ({"name": "g", "stage": "", "source": SOURCE}, "stage"),
    ],
)
def test_a_bad_record_is_refused_naming_what_is_wrong(fields: dict[str, object], named: str) -> None:
    with pytest.raises(RecordError, match=named):
        from_fields(fields)


def test_a_stored_record_must_be_named_as_its_key() -> None:
    record = from_fields({"name": "g", "stage": "tool.call", "source": SOURCE})
    with pytest.raises(RecordError, match="stored under 'h'"):
        parse_safely(record.to_bytes(), "h")
    with pytest.raises(RecordError):
        parse_safely(b"[1]", "g")


async def test_a_record_gets_restricted_builtins_and_imports() -> None:
    escape = "async def handle(stage, payload, ctx):\n    return Cancel(open('/etc/hostname').read())\n"
    handler = compile_record("e", escape)
    with pytest.raises(NameError, match="open"):
        await handler("tool.call", {}, None)  # type: ignore[arg-type]
    with pytest.raises(RecordError, match="may not import 'subprocess'"):
        compile_record("s", "import subprocess\nasync def handle(stage, payload, ctx):\n    pass\n")
    with pytest.raises(RecordError, match="must define async def handle"):
        compile_record("n", "def handle(stage, payload, ctx):\n    pass\n")
    assert compile_record("j", "import json\nasync def handle(stage, payload, ctx):\n    return Continue()\n")


def test_records_test_runs_a_file_locally_without_a_bus(tmp_path: Path) -> None:
    path = tmp_path / "guard.py"
    path.write_text(SOURCE)
    payload = json.dumps({"name": "shell", "input": {"command": "rm -rf /"}})
    done = run_cli(
        "records", "test", str(path), payload, "--stage", "tool.call", env={"NATS_URL": "nats://127.0.0.1:1"}
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"decision": "cancel", "reason": "by hand", "outcome": "ok"}
    path.write_text("async def handle(stage, payload, ctx):\n    raise ValueError('x')\n")
    failed = run_cli("records", "test", str(path), "{}", "--stage", "tool.call")
    assert failed.returncode == 1 and json.loads(failed.stdout)["outcome"] == "failed"


async def test_operator_put_list_show_and_a_runner_process(nats_url: str, tmp_path: Path) -> None:
    module = unique("cli")
    env = {"NATS_URL": nats_url}
    runner = subprocess.Popen(
        [*hookbus_cmd(), "runner", "--module", module],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert runner.stdout is not None
        assert "ready" in runner.stdout.readline()
        path = tmp_path / "no_rm.py"
        path.write_text(SOURCE)
        put = run_cli("records", "put", str(path), "--stage", "tool.call", "--module", module, env=env)
        assert put.returncode == 0 and "waiting for approval" in put.stdout, put.stderr
        listed = run_cli("records", "list", "--module", module, env=env)
        assert f"{module}.no_rm  tool.call  waiting for approval" in listed.stdout
        async with Bus(nats_url, name="kernel") as kernel:
            view = await kernel.middleware.start()
            await view.wait_until(lambda: any(c.waiting for c in view.chains.values() if c.stage == "tool.call"), 10)
            await approve(view, f"{module}.no_rm")
            await wait_for_chain(kernel, "tool.call", [f"{module}.no_rm"])
            decision = await kernel.intercept("tool.call", {"name": "shell", "input": {"command": "rm -rf /"}})
            assert isinstance(decision, Cancel) and decision.reason == "by hand"
            payload = json.dumps({"name": "shell", "input": {"command": "rm -rf /"}})
            tested = run_cli("records", "test", "no_rm", payload, "--module", module, env=env)
            assert json.loads(tested.stdout) == {"decision": "cancel", "reason": "by hand", "outcome": "ok"}
            shown = run_cli("records", "show", "no_rm", "--module", module, env=env)
            assert '"state": "approved"' in shown.stdout and "async def handle" in shown.stdout

            disabled = run_cli("records", "disable", "no_rm", "--module", module, env=env)
            assert disabled.returncode == 0, disabled.stderr
            await wait_for_chain(kernel, "tool.call", [])
    finally:
        runner.send_signal(signal.SIGTERM)
        out, _ = runner.communicate(timeout=20)
    assert runner.returncode == 0, out
    assert "stopped" in out
