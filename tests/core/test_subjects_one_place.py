"""Every hookbus subject, bucket and queue name lives in a subjects module (the protocol's in
bus/_core/subjects.py, a feature's in its package's subjects.py), and the shipped
deploy/nats/permissions.conf allows each role the subjects the code gives it."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

from bus._core import subjects
from bus._core.subjects import (
    GUARDS_BUCKET,
    MODULES_BUCKET,
    TRUST_BUCKET,
    counters_subject,
    matches,
    module_subject,
    subject_for,
)
from bus._journal.entries import JournalEntry
from bus._journal.subjects import (
    JOURNAL_PREFIX,
    JOURNAL_STREAM,
)
from bus._turns.subjects import TURN_PREFIX, turn_queue, turn_subject
from bus.adapters._subjects import adapter_subject
from subscribers.shell_hooks._subjects import SHELL_QUEUE
from triggers.engine._subjects import TRIGGERS_STATUS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("bus", "subscribers", "triggers")
#: The modules that name subjects, buckets, streams and queue groups: each file called subjects.py.
SUBJECT_FILES = sorted(
    path for top in SOURCES for name in ("subjects.py", "_subjects.py") for path in (ROOT / top).rglob(name)
)
SUBJECT_MODULES: tuple[ModuleType, ...] = tuple(
    importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts)) for path in SUBJECT_FILES
)
#: Every upper-case string constant of the subjects modules (the domains are not plumbing).
NAMES: dict[str, str] = {
    name: value
    for module in SUBJECT_MODULES
    for name, value in vars(module).items()
    if name.isupper() and isinstance(value, str) and name not in ("PRX_DOMAIN", "EVA_DOMAIN")
}
#: A string that names hookbus plumbing: a subject, a KV bucket, a stream.
PLUMBING = re.compile(r"hookbus\.[a-z]|hookbus_(modules|trust|guards|payloads)\b|HOOKBUS_JOURNAL|\$KV\.|\$JS\.|\$O\.")


def _literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants (and the constant parts of f-strings) of a module, minus logger names."""
    loggers = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger"
        for arg in node.args
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in loggers:
            found.append((node.lineno, node.value))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    doc_texts = {
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and id(node) in docstrings and isinstance(node.value, str)
    }
    return [item for item in found if item not in doc_texts]


def test_no_subject_bucket_or_stream_name_is_spelled_outside_the_subjects_modules() -> None:
    assert ROOT / "bus/_core/subjects.py" in SUBJECT_FILES and len(SUBJECT_FILES) > 5
    offenders = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            # tracing: span attribute names, not subjects
            if path in SUBJECT_FILES or path == ROOT / "bus/_runtime/tracing.py":
                continue
            for line, text in _literals(ast.parse(path.read_text(), str(path))):
                if PLUMBING.search(text) and not re.search(r"\s", text):  # prose (help texts) may name them
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    assert offenders == []


def test_the_scan_finds_a_spelled_subject() -> None:
    """The check above is not vacuous: it flags a literal subject and ignores a logger name."""
    tree = ast.parse('import logging\nlog = logging.getLogger("hookbus.x")\nS = f"hookbus.turn.{a}"\n')
    assert [text for _, text in _literals(tree) if PLUMBING.search(text)] == ["hookbus.turn."]


def _parse_permissions(text: str) -> dict[str, dict[str, list[str]]]:
    """Each user's publish and subscribe allow lists; a user without a permissions block gets everything."""
    text = re.sub(r"#[^\n]*", "", text)
    users: dict[str, dict[str, list[str]]] = {}
    blocks = re.split(r"\buser:\s*", text)[1:]
    for block in blocks:
        name = re.match(r"[\w-]+", block)
        assert name is not None
        lists: dict[str, list[str]] = {"publish": [">"], "subscribe": [">"]}
        for kind in ("publish", "subscribe"):
            found = re.search(kind + r":\s*\{\s*allow:\s*\[(.*?)\]", block, re.S)
            if found:
                lists[kind] = re.findall(r'"([^"]+)"', found.group(1))
        users[name.group(0)] = lists
    return users


PERMISSIONS = _parse_permissions((ROOT / "deploy/nats/permissions.conf").read_text())


def _allowed(user: str, kind: str, subject: str) -> bool:
    return any(matches(pattern, subject) for pattern in PERMISSIONS[user][kind])


def _kv(bucket: str) -> list[str]:
    """What reading a KV bucket takes: stream info, a direct and a message get, a watch consumer."""
    return [
        f"$JS.API.STREAM.INFO.KV_{bucket}",
        f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.key",
        f"$JS.API.STREAM.MSG.GET.KV_{bucket}",
        f"$JS.API.CONSUMER.CREATE.KV_{bucket}",
        f"$JS.FC.KV_{bucket}.x",
    ]


_READ_STATE = [name for bucket in (MODULES_BUCKET, TRUST_BUCKET, GUARDS_BUCKET) for name in _kv(bucket)]
_EVENTS = [subject_for("tool_call"), subject_for("eva.turn.completed"), subject_for("eva.custom.deploy")]
_SINK = [
    f"$JS.API.STREAM.INFO.{JOURNAL_STREAM}",
    f"$JS.API.CONSUMER.DURABLE.CREATE.{JOURNAL_STREAM}.durable",
    f"$JS.API.CONSUMER.MSG.NEXT.{JOURNAL_STREAM}.durable",
    f"$JS.ACK.{JOURNAL_STREAM}.durable.1.1.1.1.0",
]


#: Putting a whole payload in the claim check's object store (chunks, then the meta), and reading one back.
def _payloads_put(user: str) -> list[str]:
    return list(subjects.payload_subjects(user))


_PAYLOADS_GET = [f"$JS.API.DIRECT.GET.{subjects.PAYLOADS_STREAM}"]


def _journal(kinds: tuple[str, ...], origin: str) -> list[str]:
    return [
        JournalEntry(kind=kind, point="p", phase="x", who="w", decision="continue").subject(origin) for kind in kinds
    ]


#: What each role publishes and subscribes to, as the code builds the names.
ROLES: dict[str, dict[str, list[str]]] = {
    "agent-eva": {
        "publish": [
            *_EVENTS,
            module_subject("guard"),
            *_journal(("middleware",), "agent-eva"),
            *_payloads_put("agent-eva"),
            counters_subject("agent-eva"),
            *_READ_STATE,
            adapter_subject("claude-code", "agent-eva"),  # hookbus claude-hook asks hookbus up's relay, as itself
        ],
        "subscribe": [turn_subject("eva"), "_INBOX.agent-eva.reply"],
    },
    "module-guard": {
        "publish": [
            f"$KV.{MODULES_BUCKET}.guard.instance",
            f"$KV.{GUARDS_BUCKET}.guard.key",
            counters_subject("module-guard"),
            *_READ_STATE,
        ],
        "subscribe": [module_subject("guard"), "_INBOX.module-guard.reply"],
    },
    "worker": {
        "publish": [
            *_EVENTS,
            turn_subject("eva"),
            TRIGGERS_STATUS,
            *_journal(("shell_hook", "subscriber", "trigger"), "worker"),
            *_payloads_put("worker"),
            *_PAYLOADS_GET,
            counters_subject("worker"),
        ],
        "subscribe": [*_EVENTS, TRIGGERS_STATUS, "_INBOX.worker.reply"],
    },
    "sink": {"publish": [*_SINK, counters_subject("sink")], "subscribe": ["_INBOX.sink.reply"]},
    "bus": {
        "publish": [
            *_EVENTS,
            turn_subject("eva"),
            TRIGGERS_STATUS,
            *_journal(("shell_hook", "subscriber", "trigger"), "bus"),
            *_journal(("middleware",), "bus"),  # the agent-hook relay is a kernel
            module_subject("guard"),
            f"$KV.{MODULES_BUCKET}.claude-hooks.instance",  # claude-hooks.json's module
            *_payloads_put("bus"),
            *_PAYLOADS_GET,
            f"$JS.API.STREAM.INFO.{subjects.PAYLOADS_STREAM}",
            f"$JS.API.STREAM.CREATE.{subjects.PAYLOADS_STREAM}",
            f"$JS.API.STREAM.UPDATE.{subjects.PAYLOADS_STREAM}",
            counters_subject("bus"),
            *_SINK,
            *_READ_STATE,
            *[f"$JS.API.STREAM.CREATE.KV_{bucket}" for bucket in (MODULES_BUCKET, TRUST_BUCKET, GUARDS_BUCKET)],
            *[f"$JS.API.STREAM.UPDATE.KV_{bucket}" for bucket in (MODULES_BUCKET, TRUST_BUCKET, GUARDS_BUCKET)],
            f"$JS.API.STREAM.CREATE.{JOURNAL_STREAM}",
        ],
        # the fleet metrics: every journal entry and every counters report, as core subscriptions
        "subscribe": [
            *_EVENTS,
            TRIGGERS_STATUS,
            "_INBOX.bus.reply",
            *_journal(("middleware", "trigger"), "agent-eva"),
            counters_subject(None),
            counters_subject("agent-eva"),
            adapter_subject("claude-code", "agent-eva"),
            adapter_subject("codex", "agent-bob"),
            module_subject("claude-hooks"),
        ],
    },
}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_may_use_the_subjects_the_code_gives_it(role: str) -> None:
    refused = [
        f"{kind} {subject}"
        for kind, names in ROLES[role].items()
        for subject in names
        if not _allowed(role, kind, subject)
    ]
    assert refused == []


def test_roles_are_kept_out_of_what_is_not_theirs() -> None:
    """The parse and the matching are not vacuous: the conf refuses what each role must not do."""
    assert not _allowed("agent-eva", "subscribe", turn_subject("bob"))
    assert not _allowed("agent-eva", "publish", _journal(("trigger",), "agent-eva")[0])
    assert not _allowed("module-guard", "subscribe", module_subject("audit"))
    assert not _allowed("module-guard", "publish", subject_for("tool_call"))
    assert not _allowed("module-guard", "publish", f"$KV.{MODULES_BUCKET}.audit.instance")
    assert not _allowed("worker", "publish", _journal(("middleware",), "worker")[0])
    assert not _allowed("worker", "subscribe", f"{JOURNAL_PREFIX}.>")
    assert not _allowed("agent-eva", "publish", counters_subject("agent-bob"))
    assert not _allowed("worker", "publish", counters_subject("bus"))
    assert not _allowed("sink", "publish", subject_for("tool_call"))
    assert _allowed("operator", "publish", "anything.at.all")


def test_every_user_in_the_conf_is_a_role_checked_here_or_the_operator() -> None:
    roles = {re.sub(r"-(eva|bob|guard|audit|records)$", "-*", name) for name in PERMISSIONS}
    assert roles == {"agent-*", "module-*", "worker", "sink", "bus", "operator"}
    assert TURN_PREFIX == "hookbus.turn"  # the conf's hookbus.turn.<agent> grants assume it


PROTOCOL = (ROOT / "docs/protocol.md").read_text()


def test_docs_protocol_names_every_subject_bucket_stream_and_queue() -> None:
    names = list(NAMES.values())
    assert {JOURNAL_PREFIX, SHELL_QUEUE, subjects.MODULES_BUCKET} <= set(names)
    assert [name for name in names if name not in PROTOCOL] == []
    assert turn_queue("AGENT").replace("AGENT", "<agent>") in PROTOCOL
