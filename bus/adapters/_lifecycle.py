"""The PRX lifecycle events an adapter emits, built one way for every framework.

A framework callback says "an LLM call started", "a tool ended"; this module
turns that into the catalogued event (``prx.lifecycle.llm_request`` ...,
docs/events.md) with its fields, and times calls by the framework's run id.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Any, Final

from bus._core.subjects import PRX_DOMAIN

#: Event output fields are cut to this many characters (the whole output stays with the tool).
OUTPUT_CHARS: Final = 4000
#: Calls timed at once; past it the oldest start is forgotten (a framework that never ends a run).
_MAX_TIMED: Final = 10_000

Emitted = tuple[str, dict[str, Any]]


def _subject(event: str) -> str:
    return f"{PRX_DOMAIN}.{event}"


class Lifecycle:
    """Builds lifecycle events and remembers when each run started, to report its duration."""

    def __init__(self) -> None:
        self._started: dict[Hashable, tuple[float, str, str]] = {}
        self._tools: dict[Hashable, str] = {}

    def llm_request(self, run: Hashable, provider: str, model: str, messages_count: int) -> Emitted:
        if len(self._started) >= _MAX_TIMED:
            self._started.pop(next(iter(self._started)))
        self._started[run] = (time.monotonic(), provider, model)
        payload = {"provider": provider, "model": model, "messages_count": messages_count}
        return _subject("llm_request"), payload

    def llm_response(self, run: Hashable, success: bool, model: str | None = None) -> Emitted:
        started, provider, asked = self._started.pop(run, (time.monotonic(), "unknown", "unknown"))
        payload = {
            "provider": provider,
            "model": model or asked,
            "duration_ms": round((time.monotonic() - started) * 1000, 3),
            "success": success,
        }
        return _subject("llm_response"), payload

    def tool_start(self, tool: str, arguments: dict[str, Any], run: Hashable = None) -> Emitted:
        """``tool_call_start``; with ``run``, the tool's name is remembered for :meth:`tool_end`."""
        if run is not None:
            if len(self._tools) >= _MAX_TIMED:
                self._tools.pop(next(iter(self._tools)))
            self._tools[run] = tool
        return _subject("tool_call_start"), {"tool": tool, "arguments": arguments}

    def tool_end(self, tool: str | None, success: bool, output: str, run: Hashable = None) -> Emitted:
        """``tool_call``; ``tool`` None: the name remembered for ``run`` at its start."""
        remembered = self._tools.pop(run, None) if run is not None else None
        name = tool or remembered or "unknown"
        return _subject("tool_call"), {"tool": name, "success": success, "output": output[:OUTPUT_CHARS]}

    @staticmethod
    def error(component: str, error: BaseException | str) -> Emitted:
        message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return _subject("error"), {"component": component, "message": message[:OUTPUT_CHARS]}

    @staticmethod
    def agent_start(agent: str, session: str) -> Emitted:
        return _subject("agent_start"), {"agent": agent, "session": session}

    @staticmethod
    def agent_end(agent: str, success: bool, messages_count: int) -> Emitted:
        return _subject("agent_end"), {"agent": agent, "success": success, "messages_count": messages_count}
