"""A client for OpenAI-compatible chat-completions APIs (OpenAI, vLLM, Ollama, llama.cpp).

``complete`` retries transient failures (connection errors, timeouts, HTTP 429
and 5xx) with tenacity, bounded in attempts and with exponential backoff; each
retry is reported through ``on_retry`` (hook turns use it). ``once`` and
``stream`` make one attempt each, for the turn runner, which asks middleware
before every attempt (``llm.request``, ``llm.retry``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from triggers.agent._errors import LLMError

DEFAULT_TIMEOUT: Final = 60.0


@dataclass
class ChatToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Completion:
    """One answer: text and/or tool calls, plus how long it took."""

    content: str | None
    tool_calls: list[ChatToolCall] = field(default_factory=list)
    model: str = ""
    duration_ms: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)


RetryCallback = Callable[[int, BaseException, float], Awaitable[None]]
#: Called with each streamed text chunk and whether the answer has asked for a tool so far.
ChunkCallback = Callable[[str, bool], None]


def request_body(
    messages: list[dict[str, Any]],
    model: str,
    *,
    tools: list[dict[str, Any]] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    tool_choice: str | None = None,
) -> dict[str, Any]:
    """The chat-completions request body (absent options left out)."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    if tool_choice:
        body["tool_choice"] = tool_choice
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


class ChatClient:
    """POSTs to ``<base_url>/chat/completions``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        attempts: int = 3,
        backoff: float = 0.5,
        provider: str = "openai-compatible",
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.provider = provider
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        tool_choice: str | None = None,
        timeout: float | None = None,
        on_retry: RetryCallback | None = None,
    ) -> Completion:
        """Ask the model; retries transient failures, raises LLMError when it gives up."""
        body = request_body(
            messages, model or self.model, tools=tools, temperature=temperature, tool_choice=tool_choice
        )

        async def before_sleep(state: RetryCallState) -> None:
            if on_retry is not None and state.outcome is not None:
                exc = state.outcome.exception()
                assert exc is not None
                await on_retry(state.attempt_number, exc, state.upcoming_sleep)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff, max=10),
            retry=retry_if_exception(lambda exc: isinstance(exc, LLMError) and exc.transient),
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._once(body, timeout or self.timeout)
        raise AssertionError("unreachable: tenacity reraises")

    async def once(self, body: dict[str, Any], timeout: float | None = None) -> Completion:
        """One attempt, no retry: LLMError (``transient`` set for what a retry may cure) on failure."""
        return await self._once(body, timeout or self.timeout)

    async def stream(self, body: dict[str, Any], on_chunk: ChunkCallback, timeout: float | None = None) -> Completion:
        """One streamed attempt (``stream: true``): each text chunk to ``on_chunk``, the whole answer returned.

        A connection cut mid-stream is a transient LLMError like one at connect.
        """
        if self._session is None:
            self._session = aiohttp.ClientSession()
        limit = timeout or self.timeout
        start = time.monotonic()
        answer = _StreamedAnswer()
        try:
            async with self._session.post(
                self.url,
                data=orjson.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}),
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=limit),
            ) as reply:
                if reply.status == 429 or reply.status >= 500:
                    raise LLMError(f"{self.url}: HTTP {reply.status}", status=reply.status, transient=True)
                if reply.status >= 400:
                    text = await reply.read()
                    raise LLMError(f"{self.url}: HTTP {reply.status}: {text[:300]!r}", status=reply.status)
                if reply.content_type == "application/json":  # a server that does not stream answers whole
                    completion = parse_completion(await reply.read(), (time.monotonic() - start) * 1000)
                    if completion.content:
                        on_chunk(completion.content, bool(completion.tool_calls))
                    return completion
                done = False
                async for data in _sse_data(reply.content):
                    if data == b"[DONE]":
                        done = True
                        break
                    chunk = answer.add(data)
                    if chunk:
                        on_chunk(chunk, bool(answer.calls))
                if not done:
                    raise LLMError(f"{self.url}: the stream ended before data: [DONE]", transient=True)
        except TimeoutError:
            raise LLMError(f"{self.url}: no answer within {limit}s", transient=True) from None
        except aiohttp.ClientError as exc:
            raise LLMError(f"{self.url}: {type(exc).__name__}: {exc}", transient=True) from None
        return answer.completion(body.get("model", ""), (time.monotonic() - start) * 1000)

    async def _once(self, body: dict[str, Any], timeout: float) -> Completion:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        start = time.monotonic()
        try:
            async with self._session.post(
                self.url, data=orjson.dumps(body), headers=self._headers, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as reply:
                text = await reply.read()
                status = reply.status
        except TimeoutError:
            raise LLMError(f"{self.url}: no answer within {timeout}s", transient=True) from None
        except aiohttp.ClientError as exc:
            raise LLMError(f"{self.url}: {type(exc).__name__}: {exc}", transient=True) from None
        if status == 429 or status >= 500:
            raise LLMError(f"{self.url}: HTTP {status}", status=status, transient=True)
        if status >= 400:
            raise LLMError(f"{self.url}: HTTP {status}: {text[:300]!r}", status=status)
        return parse_completion(text, (time.monotonic() - start) * 1000)


def parse_completion(text: bytes, duration_ms: float) -> Completion:
    """Read a chat-completion response body, naming what is missing if it is not one."""
    try:
        data = orjson.loads(text)
        message = data["choices"][0]["message"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise LLMError(f"not a chat completion: {text[:200]!r}") from None
    calls = []
    for call in message.get("tool_calls") or []:
        try:
            function = call["function"]
            raw_args = function.get("arguments") or "{}"
            arguments = orjson.loads(raw_args) if isinstance(raw_args, str) else raw_args
        except (KeyError, TypeError, orjson.JSONDecodeError):
            raise LLMError(f"malformed tool call in the answer: {call!r}"[:300]) from None
        if not isinstance(arguments, dict):
            raise LLMError(f"tool call arguments must be a JSON object: {raw_args!r}"[:300])
        calls.append(ChatToolCall(str(call.get("id", "")), str(function.get("name", "")), arguments))
    content = message.get("content")
    return Completion(
        content if isinstance(content, str) else None, calls, str(data.get("model", "")), duration_ms, data
    )


async def _sse_data(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of a server-sent-events body, one per event line."""
    async for line in content:
        line = line.strip()
        if line.startswith(b"data:"):
            yield line[5:].strip()


class _StreamedAnswer:
    """Chat-completion chunks put back together: the text and the tool calls (arguments arrive in pieces)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.model = ""
        self.usage: dict[str, Any] | None = None

    def add(self, data: bytes) -> str:
        """Take one chunk; returns its text delta ('' for none)."""
        try:
            chunk = orjson.loads(data)
            choices = chunk.get("choices") or [{}]  # the usage chunk has none
            delta = choices[0].get("delta") or {}
            calls = delta.get("tool_calls") or []
            content = delta.get("content")
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            raise LLMError(f"not a chat-completion chunk: {data[:200]!r}") from None
        self.model = str(chunk.get("model") or self.model)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for call in calls if isinstance(calls, list) else [calls]:
            self._take_call(call)
        if isinstance(content, str) and content:
            self.text.append(content)
            return content
        return ""

    def _take_call(self, call: Any) -> None:
        """Add a tool-call delta to its call; one whose fields are not the API's types is an LLMError."""
        function = call.get("function") or {} if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise LLMError(f"malformed tool-call delta: {call!r}"[:300])
        index, name, arguments = call.get("index", 0), function.get("name") or "", function.get("arguments") or ""
        texts = isinstance(name, str) and isinstance(arguments, str)
        if isinstance(index, bool) or not isinstance(index, int) or not texts:
            raise LLMError(f"malformed tool-call delta: {call!r}"[:300])
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        slot["id"] = str(call.get("id") or slot["id"])
        slot["name"] += name
        slot["arguments"] += arguments

    def completion(self, model: str, duration_ms: float) -> Completion:
        """The streamed answer as one non-streamed completion would have read."""
        calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"] or "{}"}}
            for _, c in sorted(self.calls.items())
        ]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) if self.text else None}
        if calls:
            message["tool_calls"] = calls
        body: dict[str, Any] = {"model": self.model or model, "choices": [{"index": 0, "message": message}]}
        if self.usage is not None:
            body["usage"] = self.usage
        return parse_completion(orjson.dumps(body), duration_ms)
