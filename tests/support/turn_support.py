"""One turn of the reference runner on a fresh agent, against the scripted LLM server: what it emitted and returned."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from bus import Bus, TurnRequest
from bus._turns.subjects import agent_stream_subject
from bus.testing import EventRecorder, fake_llm
from tests.support.waiting import wait_until
from triggers.agent._llm import ChatClient
from triggers.agent.turn_runner import TurnRunner, TurnRunnerSettings


async def turn(
    bus: Bus,
    llm: fake_llm.FakeLLM,
    settings: TurnRunnerSettings | None = None,
    prompt: str = "hi",
    session: str = "s1",
    depth: int = 0,
    **client: Any,
) -> tuple[dict[str, Any], EventRecorder, list[dict[str, Any]]]:
    """One turn on a fresh agent: (its result, the events it emitted, the tokens its clients got).

    ``client`` goes to the ChatClient (``api_key``, ``timeout``, ``attempts``...).
    """
    agent = f"a{uuid.uuid4().hex[:6]}"
    rec = EventRecorder()
    await bus.subscribe("prx.lifecycle.>", rec)
    await bus.subscribe("eva.turn.*", rec)
    tokens: list[dict[str, Any]] = []
    await bus.subscribe(agent_stream_subject(agent), lambda event: tokens.append(event.payload))
    options = {"attempts": 3, "backoff": 0.01, "timeout": 5.0, **client}
    runner = TurnRunner(bus, agent, ChatClient(llm.url, "model-a", provider="fake", **options), settings=settings)
    await bus.serve_turns(agent, runner.handle)
    results: list[dict[str, Any]] = []
    inbox = bus.port.nc.new_inbox()

    async def got(msg: Any) -> None:
        results.append(orjson.loads(msg.data))

    await bus.port.nc.subscribe(inbox, cb=got)
    await bus.flush()
    await bus.request_turn(TurnRequest(agent=agent, prompt=prompt, depth=depth, session_id=session), reply=inbox)
    await wait_until(lambda: bool(results), timeout=30, what="the turn's result")
    await wait_until(lambda: any(e.subject.startswith("eva.turn.") for e in rec.events), what="eva.turn.*")
    await runner.client.close()
    return results[0], rec, tokens


async def spend_turn(workspace: Any, *agent_args: str) -> tuple[str, Any]:
    """``hookbus agent --name eva AGENT_ARGS`` against a real ``hookbus up`` whose trigger turns
    ``eva.spend.day`` into a turn on eva: its first line and the ``eva.turn.completed`` event."""
    import asyncio
    import os
    import subprocess

    from tests.cli.test_cli import UpProcess
    from tests.conftest import hookbus_cmd

    (workspace / "triggers.yaml").write_text(
        "triggers:\n  - {name: spend, on: eva.spend.day, prompt: 'spent {payload.total}', agent: eva}\n"
    )
    up = UpProcess(workspace)
    env = {**os.environ, "NATS_URL": up.nats_url, "OPENAI_API_KEY": "sk-test"}
    command = [*hookbus_cmd(), "agent", "--name", "eva", *agent_args]
    agent = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None
        line = await asyncio.to_thread(agent.stdout.readline)
        async with Bus(up.nats_url) as bus:
            rec = EventRecorder()
            await bus.subscribe("eva.turn.completed", rec)
            await bus.flush()
            await bus.emit("eva.spend.day", {"total": 42})
            [done] = await rec.wait_for(1, timeout=30)
        return line, done
    finally:
        agent.terminate()
        agent.communicate(timeout=20)
        up.close()
