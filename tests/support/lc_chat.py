"""A LangChain chat model over the OpenAI chat-completions API, for tests against bus/testing/fake_llm.py.

langchain-core ships no HTTP chat model; this is the smallest real one: the
messages go to the scripted server as an OpenAI client would send them, the
answer (text or tool calls) comes back as an AIMessage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from openai import AsyncOpenAI, OpenAI
from pydantic import Field


class ScriptedChat(BaseChatModel):
    base_url: str
    model: str = "scripted"
    tools: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-openai"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "scripted"
        params["ls_model_name"] = self.model
        return params

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:  # type: ignore[override]
        return self.model_copy(update={"tools": [convert_to_openai_tool(t) for t in tools]})

    def _body(self, messages: list[BaseMessage]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": convert_to_openai_messages(messages)}
        if self.tools:
            body["tools"] = self.tools
        return body

    @staticmethod
    def _result(answer: Any) -> ChatResult:
        message = answer.choices[0].message
        calls = [
            ToolCall(name=c.function.name, args=orjson.loads(c.function.arguments), id=c.id)
            for c in message.tool_calls or []
        ]
        ai = AIMessage(content=message.content or "", tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=ai)], llm_output={"model_name": answer.model})

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any) -> ChatResult:
        client = OpenAI(base_url=self.base_url, api_key="test", max_retries=0)
        try:
            return self._result(client.chat.completions.create(**self._body(messages)))
        finally:
            client.close()

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        client = AsyncOpenAI(base_url=self.base_url, api_key="test", max_retries=0)
        try:
            return self._result(await client.chat.completions.create(**self._body(messages)))
        finally:
            await client.close()
