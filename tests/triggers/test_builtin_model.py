"""The built-in model: deterministic chat completions (whole and streamed) for the tour, the demo and users'
tests; a trigger's turn on ``hookbus agent --llm-url builtin:`` answers with no model server anywhere."""

from __future__ import annotations

import subprocess
from typing import Any

import aiohttp
import orjson

from tests.conftest import hookbus_cmd
from tests.support.turn_support import spend_turn
from triggers.agent._builtin_model import BuiltinModel, answer_for


async def test_the_same_conversation_gets_the_same_answer_whole_and_streamed() -> None:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "spent   42 today"}]}
    async with BuiltinModel() as model, aiohttp.ClientSession() as http:
        async with http.post(f"{model.url}/chat/completions", json=body) as reply:
            whole = await reply.json()
        async with http.post(f"{model.url}/chat/completions", json={**body, "stream": True,
                             "stream_options": {"include_usage": True}}) as reply:  # fmt: skip
            assert reply.headers["Content-Type"].startswith("text/event-stream")
            raw = (await reply.read()).decode()
        async with http.get(f"{model.url}/models") as reply:
            models = await reply.json()
        async with http.post(f"{model.url}/chat/completions", data=b"not json") as reply:
            assert reply.status == 400
    text = whole["choices"][0]["message"]["content"]
    assert (
        text
        == answer_for(body)
        == 'Built-in model m here: 1 messages read; the last from the user said "spent 42 today".'
    )
    events = [line.removeprefix("data: ") for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    streamed = "".join(c["choices"][0]["delta"]["content"] for c in chunks if c["choices"])
    assert streamed == text and len([c for c in chunks if c["choices"]]) == len(text.split())
    assert chunks[-1]["usage"]["completion_tokens"] == len(text.split())
    assert models["data"][0]["id"] == "hookbus-builtin"


async def test_a_triggered_turn_answers_with_the_builtin_model(workspace: Any) -> None:
    line, done = await spend_turn(workspace, "--llm-url", "builtin:")
    assert "agent eva: serving turns with hookbus-builtin at http://127.0.0.1:" in line
    assert 'the last from the user said "spent 42"' in done.payload["answer"], done.payload


def test_hookbus_llm_serves_until_stopped() -> None:
    proc = subprocess.Popen([*hookbus_cmd(), "llm", "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("built-in model serving at http://127.0.0.1:"), line
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert proc.returncode == 0
