"""A client for OpenAI-compatible chat-completions APIs (OpenAI, vLLM, Ollama, llama.cpp).

Transient failures (connection errors, timeouts, HTTP 429 and 5xx) are retried
with tenacity, bounded in attempts and with exponential backoff; each retry is
reported through ``on_retry`` so that the agent can make it visible as an event.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from bus.core.errors import LLMError

DEFAULT_TIMEOUT_S: Final = 60.0


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


class ChatClient:
    """POSTs to ``<base_url>/chat/completions``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
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
        body: dict[str, Any] = {"model": model or self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        if tool_choice:
            body["tool_choice"] = tool_choice
        if temperature is not None:
            body["temperature"] = temperature

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
