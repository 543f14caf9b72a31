"""The built-in model: a small OpenAI-compatible chat-completions server with deterministic answers.

For the tour, the demo and tests of users' own triggers and handlers, where no
model server is at hand: ``hookbus llm`` serves it on a port, and
``hookbus agent --llm-url builtin:`` starts one inside the agent. It speaks
what the reference agent and OpenAI-style clients use: ``POST
/v1/chat/completions`` (whole answers, and server-sent chunks with
``"stream": true``, usage included when ``stream_options.include_usage`` asks),
and ``GET /v1/models``.

The answer is a function of the request alone: the same conversation gets the
same answer, word for word, on every machine. It names the model, the number of
messages and the last user message (cut to :data:`QUOTED_CHARS`); it never
calls tools. Usage counts words, a stand-in for tokens.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson
from aiohttp import web

#: How ``--llm-url`` names the built-in model.
BUILTIN_URL: Final = "builtin:"
#: The model name it reports when the request names none.
MODEL: Final = "hookbus-builtin"
#: How much of the last user message the answer quotes.
QUOTED_CHARS: Final = 200
#: The largest request body it reads (a conversation, not a data set).
MAX_BODY: Final = 4 * 1024 * 1024


def answer_for(body: dict[str, Any]) -> str:
    """The answer to a chat-completions request: deterministic, from the request alone."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    last = ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            last = _text_of(message.get("content"))
            break
    quoted = " ".join(last.split())
    if len(quoted) > QUOTED_CHARS:
        quoted = quoted[: QUOTED_CHARS - 1] + "…"
    named = body.get("model")
    model = named if isinstance(named, str) else MODEL
    said = f'"{quoted}"' if quoted else "nothing"
    return f"Built-in model {model} here: {len(messages)} messages read; the last from the user said {said}."


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def chunks(text: str) -> list[str]:
    """How a streamed answer is cut: one word with its trailing space per chunk."""
    return re.findall(r"\S+\s*", text) or [text]


def _usage(body: dict[str, Any], text: str) -> dict[str, int]:
    prompt = sum(len(_text_of(m.get("content")).split()) for m in body.get("messages") or [] if isinstance(m, dict))
    completion = len(text.split())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _complete(request: web.Request) -> web.StreamResponse:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return web.json_response({"error": {"message": "the body is not JSON"}}, status=400)
    if not isinstance(body, dict):
        return web.json_response({"error": {"message": "the body is not a JSON object"}}, status=400)
    text = answer_for(body)
    named = body.get("model")
    model = named if isinstance(named, str) else MODEL
    if body.get("stream") is True:
        return await _stream(request, body, text, model)
    answer = {
        "id": "chatcmpl-builtin",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": _usage(body, text),
    }
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def _stream(request: web.Request, body: dict[str, Any], text: str, model: str) -> web.StreamResponse:
    reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await reply.prepare(request)
    pieces = chunks(text)
    for number, piece in enumerate(pieces):
        finish = "stop" if number == len(pieces) - 1 else None
        chunk = {
            "id": "chatcmpl-builtin",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}],
        }
        await reply.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        usage = {"id": "chatcmpl-builtin", "model": model, "choices": [], "usage": _usage(body, text)}
        await reply.write(b"data: " + orjson.dumps(usage) + b"\n\n")
    await reply.write(b"data: [DONE]\n\n")
    await reply.write_eof()
    return reply


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "hookbus"}]})


class BuiltinModel:
    """The server: ``await start()``, then ``url`` is its base URL (``http://host:port/v1``); ``await stop()``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> BuiltinModel:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/chat/completions", _complete)
        app.router.add_get("/v1/models", _models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        bound = self._runner.addresses[0]
        self.port = int(bound[1])
        self.url = f"http://{self.host}:{self.port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> BuiltinModel:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
