"""Hypothesis fuzzing of the other decoders and config validators: nothing crashes, rejections say why."""

from __future__ import annotations

import uuid
from typing import Any

import nats
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus import Continue, HookbusError, Module
from bus._core.decisions import Cancel, Patch, from_wire
from bus._core.errors import ConfigError
from bus._middleware.registry import parse_announcement, version_of
from bus._turns.errors import TurnRequestError
from bus._turns.server import TurnRequest, decode_turn_request
from bus.testing import serving
from subscribers.shell_hooks._hooks_config import parse_config
from triggers.engine import _config as trigger_config

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25,
)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(json_values | st.dictionaries(st.sampled_from(["decision", "reason", "payload", "handler"]), json_values))
def test_middleware_replies(obj: Any) -> None:
    try:
        decision = from_wire(obj, "hookbus.mw.fuzz")
    except HookbusError as exc:
        assert str(exc)
    else:
        assert isinstance(decision, Continue | Cancel | Patch)


@FAST
@given(st.binary(max_size=200) | json_values.map(orjson.dumps))
def test_registry_announcements(data: bytes) -> None:
    try:
        parse_announcement(data)
    except (ValueError, KeyError, TypeError, HookbusError) as exc:  # what the registry view catches and logs
        assert str(exc) or isinstance(exc, KeyError)


@FAST
@given(
    st.binary(max_size=200)
    | st.dictionaries(st.sampled_from(["agent", "prompt", "id", "depth", "event", "trigger"]), json_values).map(
        orjson.dumps
    )
)
def test_turn_requests(data: bytes) -> None:
    try:
        request = decode_turn_request(data)
    except TurnRequestError as exc:
        assert str(exc)
    else:
        assert isinstance(request, TurnRequest) and request.depth >= 0


HOOK_FIELDS = ["command", "args", "env", "cwd", "timeout_ms", "stdin_json", "id", "enabled"]


@FAST
@given(
    st.binary(max_size=100)
    | st.dictionaries(
        st.sampled_from(["hooks", "x"]),
        st.dictionaries(
            st.text(max_size=12),
            st.lists(st.dictionaries(st.sampled_from(HOOK_FIELDS), json_values), max_size=3),
            max_size=3,
        ),
    ).map(orjson.dumps)
)
def test_hooks_json_validation(data: bytes) -> None:
    try:
        parse_config(data, "hooks.json")
    except ConfigError as exc:
        assert "hooks.json" in str(exc)


TRIGGER_FIELDS = [
    "name",
    "on",
    "prompt",
    "agent",
    "filter",
    "cooldown_s",
    "debounce_s",
    "max_in_flight",
    "dedupe",
    "enabled",
]


@FAST
@given(
    json_values
    | st.fixed_dictionaries(
        {"triggers": st.lists(st.dictionaries(st.sampled_from(TRIGGER_FIELDS), json_values), max_size=3)}
    )
)
def test_triggers_yaml_validation(doc: Any) -> None:
    try:
        trigger_config.parse(doc, "triggers.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("triggers.yaml")


async def test_a_module_survives_garbage_requests(nats_url: str) -> None:
    module = Module(f"fz{uuid.uuid4().hex[:6]}")

    @module.stage("custom.fuzz")
    async def ok(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    garbage = [b"", b"nope", b"[]", b"{}", b'{"stage": 5}', b'{"stage": "custom.fuzz", "payload": []}', b"{" * 10_000,
               orjson.dumps({"stage": "custom.fuzz", "payload": {}, "handlers": "x", "ctx": []})]  # fmt: skip
    nc = await nats.connect(nats_url)
    try:
        async with serving(module, nats_url) as task:
            for data in garbage:
                subject = f"hookbus.mw.{module.name}.{version_of(module.declarations)}"
                reply = await nc.request(subject, data, timeout=5)
                assert isinstance(orjson.loads(reply.data), dict)  # always an answer (an error or a decision)
            # a good request behind the garbage: answered by the handler, so the module is still serving
            reply = await nc.request(subject, b'{"stage": "custom.fuzz", "payload": {}}', timeout=5)
            assert orjson.loads(reply.data)["decision"] == "continue"
            assert not task.done()
    finally:
        await nc.close()
