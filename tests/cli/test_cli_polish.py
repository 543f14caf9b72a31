"""The command line's manners: help for everything in plain text, --version, options anywhere, tidy output."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

from bus._cli import build_parser, main
from bus._journal.entries import JournalEntry
from subscribers.journal._store import DB_NAME, JournalStore, Received
from tests.conftest import run_cli


def every_parser(
    parser: argparse.ArgumentParser, path: str = "hookbus"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command and subcommand's parser, with its command line."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from every_parser(sub, f"{path} {name}")


def test_every_command_and_option_has_help_in_plain_text() -> None:
    missing, rst = [], []
    for path, parser in every_parser(build_parser()):
        if path != "hookbus" and not parser.description:
            missing.append(f"{path} (description)")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{path} {c.dest}" for c in action._choices_actions if not c.help]
            elif not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        if "`" in parser.format_help():
            rst.append(path)
    assert missing == []
    assert rst == []


#: The commands whose ``--help`` also runs as a real process: the top level, the one-shot fast paths
#: (they bypass the full parser) and a nested subcommand; every other command is checked in process.
HELP_IN_A_PROCESS = ("hookbus", "hookbus emit", "hookbus claude-hook", "hookbus codex-hook", "hookbus records put")


def help_in_process(path: str) -> tuple[int, str, str]:
    """``hookbus PATH --help`` through the console script's own ``main``: exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*path.split()[1:], "--help"])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_help_runs_for_every_command() -> None:
    paths = [path for path, _ in every_parser(build_parser())]
    assert set(HELP_IN_A_PROCESS) <= set(paths)
    for path in paths:
        code, out, err = help_in_process(path)
        assert code == 0, (path, err)
        assert out.startswith(f"usage: {path}"), (path, out[:200])
    with ThreadPoolExecutor(max_workers=len(HELP_IN_A_PROCESS)) as pool:
        done_help = pool.map(lambda p: run_cli(*p.split()[1:], "--help"), HELP_IN_A_PROCESS)
        runs = dict(zip(HELP_IN_A_PROCESS, done_help, strict=True))
    for path, done in runs.items():
        assert done.returncode == 0, (path, done.stderr)
        assert done.stdout.startswith(f"usage: {path}"), (path, done.stdout[:200])


def test_version() -> None:
    done = run_cli("--version")
    assert (done.returncode, done.stdout) == (0, f"hookbus {version('hookbus')}\n")


def test_credential_flags_have_one_section_and_stay_out_of_the_usage_line() -> None:
    text = run_cli("emit", "--help").stdout
    usage, _, rest = text.partition("\n\n")
    assert "--nats-url" in usage and "--nats-password" not in usage and "--tls-ca" not in usage
    section = rest[rest.index("NATS credentials and TLS:") :]
    for flag in ("--nats-user", "--nats-password", "--nats-token", "--nats-creds", "--tls-ca", "--tls-key"):
        assert flag in section
    assert "[$HOOKBUS_NATS_PASSWORD]" in section


def test_options_are_taken_after_positionals(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "triggers.yaml").write_text(
        "triggers:\n  - {name: deploys, on: eva.custom.deploy, prompt: 'deploy of {payload.app}', agent: eva}\n"
    )
    done = run_cli("triggers", "test", "deploys", '{"app": "web"}', "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    assert "deploy of web" in done.stdout
    emitted = run_cli("emit", "eva.custom.x", "--session", "s", "[]", env={"NATS_URL": "nats://127.0.0.1:1"})
    assert emitted.stderr.splitlines() == ["hookbus: error: the payload must be a JSON object, not array"]


def test_journal_columns_are_aligned(tmp_path: Path) -> None:
    store = JournalStore(tmp_path / DB_NAME)
    entries = [
        JournalEntry("middleware", "tool.call", "before", "guard.no_rm", "cancel", "only by hand"),
        JournalEntry("trigger", "eva.custom.a_much_longer_subject", "fire", "t", "fired", "turn 1"),
    ]
    store.insert_many(
        [Received(e, stream_seq=n, received=f"2026-11-30T10:00:0{n}.000Z") for n, e in enumerate(entries, 1)]
    )
    store.close()
    done = run_cli("journal", "--workspace", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    starts = [[m.start() for m in re.finditer(r"(?<=  )\S", line)] for line in lines]
    assert starts[0] == starts[1] == starts[2]  # every column begins at the same place on every line
    assert lines[0].split()[:3] == ["RECEIVED", "TIME", "KIND"]


def test_long_running_services_wait_the_service_connect_budget() -> None:
    """Services may start before their server: each retries its first connect for SERVICE_CONNECT_S, not one-shot's."""
    from bus._cli.options import ONE_SHOT_CONNECT_S, SERVICE_CONNECT_S

    budgets = {}
    for path, parser in every_parser(build_parser()):
        for action in parser._actions:
            if action.dest == "connect_timeout":
                budgets[path] = action.default
    services = ("hookbus up", "hookbus worker", "hookbus agent", "hookbus serve", "hookbus metrics")
    assert {name: budgets[name] for name in services} == dict.fromkeys(services, SERVICE_CONNECT_S)
    assert budgets["hookbus emit"] == ONE_SHOT_CONNECT_S
