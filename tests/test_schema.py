"""bus/core/schema.py: decoding names the message and the field, and docs/protocol.md describes every type."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import msgspec
import orjson
import pytest

from bus import Bus
from bus.core.errors import TurnRequestError
from bus.core.schema import MESSAGES, TurnRequestMsg, TurnResultMsg, decode
from bus.core.subjects import TRIGGERS_STATUS
from bus.transport.nats_api import Msg
from bus.turns.server import TurnRequest, decode_turn_request

from .conftest import run_cli

PROTOCOL = (Path(__file__).resolve().parent.parent / "docs/protocol.md").read_text()


def _documented(kind: type[msgspec.Struct], text: str) -> bool:
    """Whether one paragraph (or table row) of ``text`` names every field of ``kind``."""
    fields = kind.__struct_fields__
    for paragraph in re.split(r"\n\s*\n|\n\|", text):
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", paragraph))
        if all(field in words for field in fields):
            return True
    return False


@pytest.mark.parametrize("kind", MESSAGES, ids=lambda kind: kind.__name__)
def test_docs_protocol_names_every_field_of_every_message(kind: type[msgspec.Struct]) -> None:
    assert _documented(kind, PROTOCOL), f"docs/protocol.md has no paragraph naming {kind.__struct_fields__}"


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
        (b"[1]", "turn request: expected `object`, got `array`"),
        (orjson.dumps({**REQUEST, "agent": 1}), "turn request: field 'agent': expected `str`, got `int`"),
        (orjson.dumps({**REQUEST, "depth": -1}), "turn request: field 'depth': expected `int` >= 0"),
        (orjson.dumps({**REQUEST, "depth": True}), "turn request: field 'depth': expected `int`, got `bool`"),
        (orjson.dumps({**REQUEST, "event": []}), "turn request: field 'event': expected `object | null`"),
        (orjson.dumps({"agent": "eva", "id": "r1"}), "turn request: object missing required field `prompt`"),
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

    async def answer(msg: Msg) -> None:
        await bus.publish_raw(msg.reply, orjson.dumps(forged))

    await bus.subscribe_raw(TRIGGERS_STATUS, answer)
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
