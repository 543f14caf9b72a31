"""The runner's token stream: streamed text through ``llm.token`` to the clients' subject.

The model's stream is read without waiting for handlers: chunks queue up and
one task asks ``llm.token`` and emits them in order. While a handler is slow,
the chunks that arrived meanwhile go out together, as one batch with the
index of its first chunk, so a slow handler delays the client's stream but
never stalls the model's. A patch changes only what the client gets (the
context and the transcript keep the model's text); a cancel drops the batch
from the client's stream.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bus._client import Bus
from bus._core.decisions import Cancel, Patch
from bus._core.errors import HookbusError
from bus._core.json_types import json_type
from bus._core.stages import Stage

log = logging.getLogger("hookbus.agent")


class TokenStream:
    """One turn's stream of text to clients on ``subject``, each batch asked through ``llm.token``."""

    def __init__(self, bus: Bus, subject: str, base: dict[str, Any], ctx: dict[str, Any]) -> None:
        self._bus = bus
        self._subject = subject
        self._base = base  # agent, turn: carried by every token
        self._ctx = ctx
        self._pending: list[tuple[str, bool, bool]] = []  # (text, final_answer, replace)
        self._index = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._task = asyncio.create_task(self._pump())

    def push(self, text: str, final_answer: bool) -> None:
        """Queue a chunk of the model's stream (never waits)."""
        self._pending.append((text, final_answer, False))
        self._wake.set()

    def replace(self, text: str) -> None:
        """Queue a final-answer token that replaces what the client was streamed of this answer."""
        self._pending.append((text, True, True))
        self._wake.set()

    async def close(self) -> None:
        """Send what is queued, then stop."""
        self._closed = True
        self._wake.set()
        await self._task

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                try:
                    await self._send(self._batch())
                except HookbusError as exc:  # the bus closing, or a batch it refused: the turn goes on
                    log.warning("a streamed batch was not sent to %s: %s", self._subject, exc)
            if self._closed:
                return

    def _batch(self) -> dict[str, Any]:
        """The queued chunks that go out together: same final_answer flag, a replace only first."""
        text, final_answer, replace = self._pending.pop(0)
        parts = [text]
        while self._pending and self._pending[0][1] == final_answer and not self._pending[0][2]:
            parts.append(self._pending.pop(0)[0])
        token = {**self._base, "text": "".join(parts), "index": self._index, "final_answer": final_answer}
        token["replace"] = replace
        self._index += len(parts)
        return token

    async def _send(self, token: dict[str, Any]) -> None:
        decision = await self._bus.intercept(Stage.LLM_TOKEN, token, ctx=self._ctx)
        if isinstance(decision, Cancel):
            return
        if isinstance(decision, Patch):
            text = decision.payload.get("text")
            if isinstance(text, str):
                token = {**token, "text": text}
            else:  # the client still gets the model's text: a token is no place to fail a turn
                log.warning("llm.token patch: 'text' must be a string, not %s; streamed unchanged", json_type(text))
        await self._bus.emit(self._subject, token, session_id=self._ctx.get("session"))
