"""A small local server speaking the OpenAI chat-completions API with scripted answers.

Each request takes the next step of the script: an answer (text or tool calls),
an HTTP status to fail with, or a delay to hang for. Requests are recorded.
A request with ``stream: true`` gets the answer as server-sent chunks (one per
word); a ``cut(text, n)`` step sends its first n chunks and then drops the
connection, a transient failure mid-stream.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


def text(content: str, usage: tuple[int, int] | None = None) -> dict[str, Any]:
    """A text answer; ``usage`` (prompt, completion tokens) is reported as the provider would."""
    step: dict[str, Any] = {"message": {"role": "assistant", "content": content}}
    if usage is not None:
        step["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return step


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


def cut(content: str, chunks: int) -> dict[str, Any]:
    """Stream the first ``chunks`` chunks of ``content``, then drop the connection."""
    return {**text(content), "cut": chunks}


def gated(content: str) -> dict[str, Any]:
    """Stream the first chunk of ``content``, the rest once the server's ``gate`` is set."""
    return {**text(content), "gated": True}


def unstreamed(content: str) -> dict[str, Any]:
    """A text answer sent whole as JSON even to a streaming request (as servers without streaming do)."""
    return {**text(content), "unstreamed": True}


def words(content: str) -> list[str]:
    """How the fake server chunks a streamed text: one word with its trailing space per chunk."""
    return re.findall(r"\S+\s*", content) or [content]


@dataclass
class FakeLLM:
    """The server: ``await FakeLLM(script=[...]).start()`` listens on ``url``; ``await stop()`` ends it."""

    script: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    default: dict[str, Any] = field(default_factory=lambda: text("ok"))
    url: str = ""
    streamed: int = 0  # streamed answers sent whole
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # a "gated" step streams its first chunk, then waits
    _runner: web.AppRunner | None = None

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        step = self.script.pop(0) if self.script else self.default
        if "hang" in step:
            await asyncio.sleep(step["hang"])  # the scenario: a model that answers too late
            step = text("too late")
        if "status" in step:
            return web.Response(status=step["status"], text="scripted failure")
        if body.get("stream") and not step.get("unstreamed"):
            return await self._stream(request, body, step)
        answer = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": step["message"]}],
        }
        if "usage" in step:
            answer["usage"] = step["usage"]
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def _stream(self, request: web.Request, body: dict[str, Any], step: dict[str, Any]) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        message = step["message"]
        deltas: list[dict[str, Any]] = [{"content": chunk} for chunk in words(message.get("content") or "")]
        if not message.get("content"):
            deltas = []
        for index, call in enumerate(message.get("tool_calls") or []):
            deltas.append({"tool_calls": [{"index": index, "id": call["id"], "function": call["function"]}]})
        for number, delta in enumerate(deltas):
            if "cut" in step and number == step["cut"]:
                assert request.transport is not None
                request.transport.close()  # the scenario: the connection dies mid-stream
                return reply
            chunk = {"model": body.get("model", "fake"), "choices": [{"index": 0, "delta": delta}]}
            await reply.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            if step.get("gated") and number == 0:
                await self.gate.wait()  # the scenario: the rest of the answer comes when the test opens the gate
        if "usage" in step and (body.get("stream_options") or {}).get("include_usage"):
            usage = {"model": body.get("model", "fake"), "choices": [], "usage": step["usage"]}
            await reply.write(b"data: " + orjson.dumps(usage) + b"\n\n")
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        self.streamed += 1
        return reply

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
