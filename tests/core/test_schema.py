"""bus/_core/schema.py: decoding names the message and the field, and docs/protocol.md describes every message."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from bus import Bus
from bus import _presence as presence
from bus._core import envelope_schema, middleware_schema
from bus._core.declaration import Declaration
from bus._core.errors import ConfigError, JournalError
from bus._core.middleware_schema import AnnouncementMsg
from bus._core.schema import convert, decode
from bus._journal import schema as journal_schema
from bus._journal.entries import CAUSE_CAP, JournalEntry, decode_checked
from bus._middleware import schema as stored_schema
from bus._middleware.guards import GuardRecord, parse_record
from bus._middleware.registry import Announcement, parse_announcement
from bus._middleware.schema import TrustRecord
from bus._middleware.trust import approved_identity, trust_record
from bus._records import schema as record_schema
from bus._turns import schema as turn_schema
from bus._turns.errors import TurnRequestError
from bus._turns.schema import (
    TurnRequestMsg,
    TurnResultMsg,
)
from bus._turns.server import TurnRequest, decode_turn_request
from bus.adapters import _schema as adapter_schema
from tests.conftest import run_cli
from triggers.agent import _hook_turn as hook_turn
from triggers.agent._config_schema import HOOK_TURN_TIMEOUT, HookTurn
from triggers.engine import _config as trigger_config
from triggers.engine import _schema as trigger_schema
from triggers.engine._subjects import TRIGGERS_STATUS

PROTOCOL = (Path(__file__).resolve().parents[2] / "docs/protocol.md").read_text()
#: The wire messages docs/protocol.md describes, each where its owner declares it (counters: docs/metrics.md).
MESSAGES: tuple[type[msgspec.Struct], ...] = (
    envelope_schema.EnvelopeMsg,
    envelope_schema.PayloadRefMsg,
    journal_schema.JournalEntryMsg,
    turn_schema.TurnRequestMsg,
    turn_schema.TurnResultMsg,
    trigger_schema.TriggerStatusMsg,
    trigger_schema.TriggerRow,
    stored_schema.TrustRecord,
    stored_schema.TrustApproval,
    stored_schema.GuardRecordMsg,
    middleware_schema.AnnouncementMsg,
    presence.PresenceMsg,
    presence.PresenceComponent,
    middleware_schema.MiddlewareRequest,
    middleware_schema.RequestCtx,
    middleware_schema.MiddlewareReply,
    middleware_schema.ReactionMsg,
    adapter_schema.AdapterRequestMsg,
    adapter_schema.AdapterReplyMsg,
    record_schema.HandlerRecordMsg,
    record_schema.ApprovedRecordMsg,
)


def _documented(kind: type[msgspec.Struct], text: str) -> bool:
    """Whether one section (heading to heading) of ``text`` names every field of ``kind``."""
    fields = kind.__struct_fields__
    for paragraph in re.split(r"\n#+ ", text):
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", paragraph))
        if all(field in words for field in fields):
            return True
    return False


@pytest.mark.parametrize("kind", MESSAGES, ids=lambda kind: kind.__name__)
def test_docs_protocol_names_every_field_of_every_message(kind: type[msgspec.Struct]) -> None:
    assert _documented(kind, PROTOCOL), f"docs/protocol.md has no section naming {kind.__struct_fields__}"


def test_the_documentation_check_sees_a_missing_field() -> None:
    class Undocumented(msgspec.Struct):
        id: str
        agent: str
        zz_not_in_the_docs: int

    assert not _documented(Undocumented, PROTOCOL)


REQUEST = {"agent": "eva", "prompt": "hi", "id": "r1"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"nope", "turn request is not JSON"),
        (b"[1]", "turn request must be a JSON object, not array"),
        (orjson.dumps({**REQUEST, "agent": 1}), "turn request: field 'agent': expected `str`, got `int`"),
        (orjson.dumps({**REQUEST, "depth": -1}), "turn request: field 'depth': expected `int` >= 0"),
        (orjson.dumps({**REQUEST, "depth": True}), "turn request: field 'depth': expected `int`, got `bool`"),
        (orjson.dumps({**REQUEST, "event": []}), "turn request: field 'event': expected `object | null`"),
        (orjson.dumps({"agent": "eva", "id": "r1"}), "turn request: field 'prompt' is required"),
    ],
)
def test_a_bad_turn_request_is_refused_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(TurnRequestError) as caught:
        decode_turn_request(data)
    assert str(caught.value).startswith(message)


def test_a_turn_request_decodes_with_defaults_and_ignores_unknown_fields() -> None:
    request = decode_turn_request(orjson.dumps({**REQUEST, "future_field": 1, "timestamp": None}))
    assert isinstance(request, TurnRequest)
    assert (request.agent, request.prompt, request.id, request.depth, request.event) == ("eva", "hi", "r1", 0, None)
    assert request.timestamp  # filled in when absent


def test_a_turn_request_round_trips_through_its_wire_type() -> None:
    request = TurnRequest(agent="eva", prompt="go", depth=2, trigger="t", event={"a": [1]}, session_id="s")
    assert decode_turn_request(request.encode()) == request
    assert decode(request.encode(), TurnRequestMsg, "turn request", TurnRequestError).depth == 2


def test_a_turn_request_has_its_wire_types_fields_one_for_one() -> None:
    # decode_turn_request builds the request from the decoded message field by field, by name.
    assert {f.name for f in dataclasses.fields(TurnRequest)} == set(TurnRequestMsg.__struct_fields__)


def test_a_turn_result_has_one_of_two_statuses() -> None:
    ok = decode(
        b'{"id":"r1","agent":"eva","status":"completed","answer":"a"}', TurnResultMsg, "turn result", ValueError
    )
    assert (ok.status, ok.answer, ok.error) == ("completed", "a", None)
    with pytest.raises(ValueError, match="turn result: field 'status'"):
        decode(b'{"id":"r1","agent":"eva","status":"maybe"}', TurnResultMsg, "turn result", ValueError)


async def test_the_cli_refuses_a_forged_trigger_status_naming_the_field(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    """Anyone who may publish on the status subject can answer it: the CLI checks the reply against the schema."""
    forged = {"triggers": [{"name": "t", "on": "x.>", "agent": "eva", "enabled": True, "fired": -3}]}

    async def answer(msg: Any) -> None:  # the raw message type of subscribe_raw
        await bus.port.publish_raw(msg.reply, orjson.dumps(forged))

    await bus.port.subscribe_raw(TRIGGERS_STATUS, answer)
    await bus.flush()
    args = ("triggers", "--workspace", str(tmp_path), "list", "--json", "--nats-url", nats_url)
    listing = await asyncio.to_thread(run_cli, *args)
    assert listing.returncode != 0
    assert f"the status reply on {TRIGGERS_STATUS}: field 'triggers[0].fired': expected `int` >= 0" in listing.stderr
    assert "Traceback" not in listing.stderr

    forged["triggers"][0].update(fired=1, last_fired=None, in_flight=0, suppressed={"debounce": 2})
    listing = await asyncio.to_thread(run_cli, *args)
    assert listing.returncode == 0, listing.stderr
    assert orjson.loads(listing.stdout) == {"running": True, "triggers": forged["triggers"]}


J = "  - {name: j, stage: tool.call, prompt: p"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (J + ", 3: x}", "hook-turn 'j': a key: expected `str`"),
        (J + ", timeout: 0}", "hook-turn 'j': field 'timeout': expected `float` > 0.0"),
        (J + ", timeout: 3601}", "hook-turn 'j': field 'timeout': expected `float` <= 3600"),
        (J + ", timeout: 5, timeout_s: 5}", "hook-turn 'j': give 'timeout' (seconds) or its older spelling"),
        (J + ", timeout_s: 0}", "hook-turn 'j': field 'timeout_s': expected `float` > 0.0"),
        (J + ", timeout_s: true}", "hook-turn 'j': field 'timeout_s': expected `float`, got `bool`"),
        (J + ", match: [a, '']}", "hook-turn 'j': field 'match[1]': expected `str` of length >= 1"),
        (J + ", match: null}", "hook-turn 'j': field 'match': expected `str | array`, got `null`"),
        ("  - {name: j, stage: tool.call, prompt: '  '}", "hook-turn 'j': field 'prompt'"),
        ("  - {name: 'j k', stage: tool.call, prompt: p}", "hook-turn #1: field 'name': expected `str` matching"),
        (J + "}\n  - [x]", "hook-turn #2: must be a mapping"),
    ],
)
def test_hook_turns_yaml_problems_name_the_file_entry_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "hook_turns.yaml"
    path.write_text("hook_turns:\n" + text + "\n")
    with pytest.raises(ConfigError) as caught:
        hook_turn.load(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_a_hook_turn_entry_takes_one_string_or_a_list() -> None:
    one = convert({"name": "j", "stage": "tool.call", "prompt": "p", "match": "shell"}, HookTurn, "e", ConfigError)
    assert one.match == "shell" and one.before == [] and one.timeout is msgspec.UNSET
    entry = {"name": "j", "stage": "s", "prompt": "p", "match": ["a", "b"], "timeout": 3}
    many = convert(entry, HookTurn, "e", ValueError)
    assert many.match == ["a", "b"] and many.timeout == 3.0


@pytest.mark.parametrize(
    ("field", "expected"), [("", HOOK_TURN_TIMEOUT), (", timeout: 3", 3.0), (", timeout_s: 4", 4.0)]
)
def test_a_hook_turn_timeout_is_timeout_or_its_older_spelling(tmp_path: Path, field: str, expected: float) -> None:
    path = tmp_path / "hook_turns.yaml"
    path.write_text("hook_turns:\n" + J + field + "}\n")
    [spec] = hook_turn.load(path)
    assert spec.timeout == expected and isinstance(spec.timeout, float)


T = {"name": "t", "on": "eva.x", "prompt": "p", "agent": "a"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"cooldown_s": True}, "field 'cooldown_s': expected `float`, got `bool`"),
        ({"max_in_flight": 1.5}, "field 'max_in_flight': expected `int`, got `float`"),
        ({"enabled": "yes"}, "field 'enabled': expected `bool`, got `str`"),
        ({"dedupe": 3}, "field 'dedupe': expected `str | null`, got `int`"),
        ({"prompt": ""}, "field 'prompt': expected `str` of length >= 1"),
        ({"turn_timeout_s": -1}, "field 'turn_timeout_s': expected `float` >= 0.0"),
    ],
)
def test_triggers_yaml_problems_name_the_trigger_and_the_field(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        trigger_config.parse({"triggers": [{**T, **extra}]}, "triggers.yaml")
    assert str(caught.value) == f"triggers.yaml: trigger 't': {message}"


def test_a_trigger_takes_its_numbers_as_floats_and_its_defaults_from_the_schema() -> None:
    spec = trigger_config.parse({"triggers": [{**T, "cooldown_s": 60}]}, "triggers.yaml")["t"]
    assert spec.cooldown_s == 60.0 and isinstance(spec.cooldown_s, float)
    assert (spec.max_in_flight, spec.dedupe_window_s, spec.turn_timeout, spec.enabled) == (1, 3600.0, 600.0, True)


def test_a_trust_record_follows_its_type_and_a_kernel_reads_only_its_identity() -> None:
    decl = Declaration(module="m", name="h", stage="tool.call")
    record = decode(trust_record(decl, "approved"), TrustRecord, "trust value", ValueError)
    assert (record.identity, record.declaration, record.how) == (decl.identity(), decl.to_wire(), "approved")
    assert approved_identity(orjson.dumps({"identity": "abc", "future": 1})) == "abc"
    for bad in (b"", b"[]", b"nope", orjson.dumps({"identity": 3}), orjson.dumps({"how": "approved"})):
        assert approved_identity(bad) is None


def test_a_guard_record_round_trips_and_a_bad_one_is_named() -> None:
    decl = Declaration(module="m", name="h", stage="tool.call", fail_closed=True)
    record = GuardRecord(decl, decl.identity(), 5.0)
    assert parse_record(record.key, record.to_bytes()) == record
    wire = orjson.loads(record.to_bytes())
    assert wire == {"identity": decl.identity(), "declaration": decl.to_wire(), "at": 5.0, "stopped_at": None}
    assert parse_record(record.key, orjson.dumps({**wire, "at": None})).at == 0.0
    for bad, message in [
        ({**wire, "at": "5"}, "field 'at': expected `float | null`, got `str`"),
        ({**wire, "declaration": []}, "field 'declaration': expected `object`, got `array`"),
        ({"declaration": wire["declaration"]}, "field 'identity' is required"),
        ({**wire, "identity": "0" * 64}, "does not match its declaration"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_record(record.key, orjson.dumps(bad))


def test_an_announcement_follows_its_type_and_only_true_means_batches() -> None:
    decl = Declaration(module="g", name="h", stage="tool.call")
    ann = Announcement("g", "i1", "hookbus.mw.g", 2.0, True, (decl,))
    wire = orjson.loads(ann.to_bytes())
    assert set(wire) == set(AnnouncementMsg.__struct_fields__) - {"refresh"}  # a heartbeating (protocol 1) module
    assert parse_announcement(ann.to_bytes(), "g.i1") == ann
    refreshing = Announcement("g", "i2", "hookbus.mw.g", 2.0, True, (decl,), refresh=600.0)
    assert set(orjson.loads(refreshing.to_bytes())) == set(AnnouncementMsg.__struct_fields__)
    assert parse_announcement(refreshing.to_bytes(), "g.i2").refresh == 600.0
    assert parse_announcement(orjson.dumps({**wire, "batch": "yes"}), "g.i1").batch is False
    for bad, message in [
        ({**wire, "heartbeat": 0.01}, "announcement: field 'heartbeat': expected `float` >= 0.05"),
        ({**wire, "instance": 5}, "announcement: field 'instance': expected `str`, got `int`"),
        ({**wire, "handlers": "x"}, "announcement: field 'handlers': expected `array`, got `str`"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_announcement(orjson.dumps(bad), "g.i1")


def test_a_journal_entry_is_checked_by_the_schema_then_clamped() -> None:
    good = orjson.loads(JournalEntry("trigger", "p", "fire", "w", "fired").encode())
    long_cause = "x" * (CAUSE_CAP + 10) + "\x00"
    entry, cut = decode_checked(orjson.dumps({**good, "cause": long_cause, "who": "a\x00b"}))
    assert entry.who == "a\ufffdb" and len(entry.cause or "") == CAUSE_CAP and cut == ("cause",)
    for bad, reason, message in [
        (b"[]", "malformed", "journal entry must be a JSON object, not array"),
        (b"nope", "malformed", "journal entry is not JSON"),
        (orjson.dumps({**good, "kind": "gossip"}), "kind", "journal entry kind 'gossip' is not one of"),
        (orjson.dumps({**good, "depth": True}), "invalid", "journal entry: field 'depth': expected `int`, got `bool`"),
        (orjson.dumps({**good, "who": ""}), "invalid", "journal entry: field 'who': expected `str` of length >= 1"),
        (orjson.dumps({**good, "session": ""}), "invalid", "journal entry: field 'session': expected `str` of length"),
    ]:
        with pytest.raises(JournalError) as caught:
            decode_checked(bad)
        assert caught.value.reason == reason and str(caught.value).startswith(message)
