"""Who decided a call, completely: each middleware journal entry names the handler and everything about its run."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import orjson

from bus import Bus, Cancel, Module, Patch
from bus._journal.entries import PROCESS, ensure_journal_stream
from bus.testing import JournalRecorder, serving, wait_for_chain
from subscribers.journal._store import DB_NAME, JournalStore, Query
from subscribers.journal.sink import JournalSink
from tests.conftest import run_cli, unique
from tests.support.waiting import wait_until


def sha(payload: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def modules(stage: str) -> tuple[Module, Module]:
    """A redacting module before a guarding one (two requests: the kernel sees what each was sent)."""
    first, second = Module(unique("who")), Module(unique("who"))

    @first.stage(stage, priority=20)
    async def redact(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({"command": "ls", "note": "redacted"})

    @second.stage(stage, priority=10)
    async def guard(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("no")

    @second.stage(f"{stage}.faulty", fail_closed=True)
    async def broken(stage: str, payload: dict[str, Any]) -> Cancel:
        raise RuntimeError("handler bug")

    return first, second


async def test_a_module_handler_entry_names_version_payload_change_kernel(kernel: Bus, nats_url: str) -> None:
    stage = f"custom.{unique('who')}"
    first, second = modules(stage)
    journal = await JournalRecorder().attach(kernel)
    async with serving(first, nats_url), serving(second, nats_url):
        await wait_for_chain(kernel, stage, [f"{first.name}.redact", f"{second.name}.guard"])
        await wait_for_chain(kernel, f"{stage}.faulty", [f"{second.name}.broken"])
        view = await kernel.middleware.start()
        versions = [link.subject.rpartition(".")[2] for link in view.chains[stage].links]
        call = {"command": "rm -rf /", "env": {"A": "1"}}
        decision = await kernel.intercept(stage, call)
        assert isinstance(decision, Cancel)
        assert isinstance(await kernel.intercept(f"{stage}.faulty", {"x": 1}), Cancel)
        entries = await journal.wait_for(3)
    by_who = {entry.who: entry for entry in entries}
    redact, guard = by_who[f"{first.name}.redact"], by_who[f"{second.name}.guard"]
    broken = by_who[f"{second.name}.broken"]
    assert all(versions) and versions[0] != versions[1]  # each module's own, as the kernel derived it
    assert (redact.version, guard.version, broken.version) == (versions[0], versions[1], versions[1])
    assert redact.decision == "patch" and redact.payload_sha256 == sha(call)
    assert redact.changed == "~command,+note,-env"
    assert guard.decision == "cancel" and guard.payload_sha256 == sha({"command": "ls", "note": "redacted"})
    assert guard.changed is None and guard.fail_mode is None
    assert broken.decision == "failed" and broken.fail_mode == "closed"
    assert broken.payload_sha256 == sha({"x": 1})
    for entry in (redact, guard, broken):
        assert entry.kernel == PROCESS and entry.identity and entry.rule is None
        assert entry.duration_ms is not None


async def test_a_rule_entry_names_the_rule_and_what_its_patch_changed(nats_url: str, tmp_path: Path) -> None:
    stem = unique("whorules")
    path = tmp_path / f"{stem}.yaml"
    path.write_bytes(
        b"rules:\n  - name: strip\n    stage: tool\n    priority: 10\n    if: 'has(payload.input.token)'\n"
        b"    then: {patch: {remove: [input.token]}}\n"
        b"  - name: deny\n    stage: tool\n    if: 'payload.input.command == \"ls\"'\n    then: cancel\n"
        b"    reason: no ls\n"
    )
    async with Bus(nats_url, rules=[path]) as bus:
        journal = await JournalRecorder().attach(bus)
        await bus.middleware.start()
        call = {"name": "bash", "input": {"command": "ls", "token": "t"}}
        assert isinstance(await bus.intercept("tool.call", call), Cancel)
        entries = await journal.wait_for(2)
    strip, deny = (next(e for e in entries if e.who == f"{stem}.{name}") for name in ("strip", "deny"))
    assert strip.rule == "has(payload.input.token)" and strip.decision == "patch"
    assert strip.changed == "~input" and strip.payload_sha256 == sha(call)
    assert deny.rule == 'payload.input.command == "ls"' and deny.decision == "cancel"
    assert deny.payload_sha256 == sha({"name": "bash", "input": {"command": "ls"}})
    assert strip.version is None and strip.kernel == PROCESS


async def test_the_sink_stores_who_decided_and_the_chain_still_verifies(
    kernel: Bus, nats_url: str, workspace: Path
) -> None:
    await ensure_journal_stream(kernel.port)
    stage = f"custom.{unique('whosink')}"
    first, second = modules(stage)
    sink = JournalSink(kernel, workspace)
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop))
    try:
        async with serving(first, nats_url), serving(second, nats_url):
            await wait_for_chain(kernel, stage, [f"{first.name}.redact", f"{second.name}.guard"])
            await kernel.intercept(stage, {"command": "rm"})
            await wait_until(lambda: sink.stored >= 2, 30, "the sink to store both entries")
    finally:
        stop.set()
        await task
    store = JournalStore(workspace / DB_NAME)
    rows = [row for _, row in store.query(Query(who=f"{first.name}.redact"))]
    store.close()
    assert rows and rows[0].entry.changed == "~command,+note" and rows[0].entry.kernel == PROCESS
    assert rows[0].entry.payload_sha256 == sha({"command": "rm"}) and rows[0].entry.version
    assert rows[0].origin is None  # no NATS user here: the sink names the user only from the subject
    lines = run_cli("journal", "--workspace", str(workspace), "--json", "--who", f"{first.name}.redact")
    line = orjson.loads(lines.stdout.splitlines()[0])
    assert line["changed"] == "~command,+note" and "rule" not in line  # empty fields left out
    done = run_cli("journal", "verify", "--workspace", str(workspace), "--public-key", sink.key.public_key)
    assert done.returncode == 0, done.stderr


def test_the_sink_checks_and_caps_the_new_fields_as_any_other() -> None:
    from bus._core.errors import JournalError
    from bus._journal.entries import JournalEntry, decode_checked

    base = orjson.loads(JournalEntry("middleware", "tool.call", "request", "h", "patch").encode())
    entry, cut = decode_checked(
        orjson.dumps({**base, "rule": "x" * 5000, "changed": "~a"}), "hookbus.journal.middleware"
    )
    assert entry.rule is not None and len(entry.rule) == 4096 and cut == ("rule",) and entry.changed == "~a"
    for field, value in (("fail_mode", 5), ("kernel", ""), ("payload_sha256", ["a"])):
        try:
            decode_checked(orjson.dumps({**base, field: value}), "hookbus.journal.middleware")
        except JournalError as exc:
            assert field in str(exc)
        else:
            raise AssertionError(f"{field}={value!r} was taken")
    old = {k: v for k, v in base.items() if k not in ("version", "rule", "payload_sha256", "changed", "kernel")}
    assert decode_checked(orjson.dumps(old), "hookbus.journal.middleware")[0].kernel is None  # an older publisher


async def test_an_ask_entry_names_the_payload_held(nats_url: str, tmp_path: Path) -> None:
    stem = unique("whoask")
    path = tmp_path / f"{stem}.yaml"
    path.write_bytes(b"rules:\n  - name: hold\n    stage: tool\n    if: 'true'\n    then: {ask: 'really?'}\n")
    async with Bus(nats_url, rules=[path]) as bus:
        journal = await JournalRecorder().attach(bus)
        await bus.middleware.start()
        call = {"name": "bash", "input": {"command": "rm"}}
        asked = await bus.middleware.intercept_unheld("tool.call", call, keep=False)
        assert not asked.id  # type: ignore[union-attr]
        (entry,) = await journal.wait_for(1)
    assert (entry.who, entry.decision) == (f"{stem}.hold", "asked")
    assert entry.payload_sha256 == sha(call) and entry.rule == "true" and entry.kernel == PROCESS
