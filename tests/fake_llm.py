"""A small local server speaking the OpenAI chat-completions API with scripted answers.

Each request takes the next step of the script: an answer (text or tool calls),
an HTTP status to fail with, or a delay to hang for. Requests are recorded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


def text(content: str) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": content}}


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "message": {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(args).decode()},
                }
                for i, (name, args) in enumerate(calls)
            ],
        }
    }


def status(code: int) -> dict[str, Any]:
    return {"status": code}


def hang(seconds: float) -> dict[str, Any]:
    return {"hang": seconds}


@dataclass
class FakeLLM:
    script: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    default: dict[str, Any] = field(default_factory=lambda: text("ok"))
    url: str = ""
    _runner: web.AppRunner | None = None

    async def _complete(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        step = self.script.pop(0) if self.script else self.default
        if "hang" in step:
            await asyncio.sleep(step["hang"])  # the scenario: a model that answers too late
            step = text("too late")
        if "status" in step:
            return web.Response(status=step["status"], text="scripted failure")
        answer = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop", **step}],
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def start(self) -> FakeLLM:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
