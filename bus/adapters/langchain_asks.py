"""LangChain v1's human in the loop, answered by the fleet: ``HumanInTheLoopMiddleware`` whose interrupts are asks.

``create_agent(model, tools, middleware=[FleetHumanInTheLoopMiddleware(bus, interrupt_on={"shell": True})])``
takes what LangChain's ``HumanInTheLoopMiddleware`` takes. Where that one
calls LangGraph's ``interrupt`` (a checkpointer, and the same process
resuming with ``Command(resume=...)``), this one holds each gated tool call
of the model's turn as an ask in ``hookbus_asks`` (stage ``tool.call``,
handler ``langchain.human_in_the_loop``, the exact arguments), all at once,
and the agent goes on with the answers, given on any machine (``hookbus
allow / deny / edit``, the console, a signed link):

- allow: ``approve``;
- deny (or the deadline): ``reject`` with the operator's reason, which the model reads;
- edit: ``edit`` with the edited arguments (``{"input": {...}}``, or the whole
  ``{"name", "input"}`` payload); the tool runs with them.

A decision the tool's ``allowed_decisions`` leave out is a rejection naming
it. Batched mode only (one model turn's calls together). The async agent
(``ainvoke``/``astream``) takes a Bus or a SyncBus, the sync one a SyncBus.
Needs ``langchain`` v1.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.agents.middleware.human_in_the_loop import InterruptOnConfig
from langchain_core.messages import AIMessage, ToolCall, ToolMessage

from bus._client import Bus
from bus._core.decisions import Ask, Cancel, Decision, Patch
from bus._core.middleware_schema import RequestCtx
from bus._middleware.kernel.asking import Held
from bus.adapters._calls import AnyBus, need_sync
from bus.sync import SyncBus

__all__ = ["ASKER", "FleetHumanInTheLoopMiddleware"]

#: The handler name LangChain's reviews are asked under (what a standing rule names).
ASKER: Final = "langchain.human_in_the_loop"
TOOL_CALL: Final = "tool.call"
#: Where LangChain's middleware keeps a turn's edits for ``wrap_tool_call`` (langchain.agents.middleware).
_EDITED: Final = "hitl_edited_tool_calls"


def hitl_decision(decision: Decision, tool_call: ToolCall, allowed: list[str]) -> dict[str, Any]:
    """A hookbus answer as LangChain's review decision, within the decisions the tool allows."""
    if isinstance(decision, Cancel):
        wanted: dict[str, Any] = {"type": "reject", "message": decision.reason}
    elif isinstance(decision, Patch):
        payload = decision.payload
        args = payload.get("input", payload)
        edited = {"name": tool_call["name"], "args": args if isinstance(args, dict) else {}}
        wanted = {"type": "edit", "edited_action": edited}
    else:
        wanted = {"type": "approve"}
    if wanted["type"] in allowed:
        return wanted
    return {
        "type": "reject",
        "message": f"an operator answered {wanted['type']}, which {tool_call['name']} does not allow",
    }


class FleetHumanInTheLoopMiddleware(HumanInTheLoopMiddleware):
    """``HumanInTheLoopMiddleware`` whose reviews are fleet asks (see the module doc)."""

    def __init__(
        self,
        bus: AnyBus,
        interrupt_on: dict[str, bool | InterruptOnConfig],
        *,
        session_id: str | None = None,
        agent: str | None = None,
        timeout: float = 300.0,
        description_prefix: str = "Tool execution requires approval",
    ) -> None:
        super().__init__(interrupt_on, description_prefix=description_prefix)
        self.bus = bus
        self.session_id = session_id
        self.agent = agent
        self.timeout = timeout
        #: How long a SyncBus waits for the answers: the deadline, and the time its expiry takes.
        self._wait = timeout + 30.0

    async def _hold_all(self, gated: list[tuple[int, ToolCall, InterruptOnConfig, str]]) -> list[Decision]:
        """Hold every gated call's ask at once (on the Bus's loop) and wait for all the answers."""
        bus = self.bus.bus if isinstance(self.bus, SyncBus) else self.bus
        holds = []
        for _, tool_call, _, why in gated:
            payload: dict[str, Any] = {"name": tool_call["name"], "input": dict(tool_call["args"])}
            if tool_call.get("id"):
                payload["id"] = tool_call["id"]
            holds.append(_held(bus, payload, why, self.session_id, self.agent, self.timeout))
        return list(await asyncio.gather(*holds))

    def _gated(self, state: Any, runtime: Any) -> tuple[AIMessage | None, list[tuple[int, ToolCall, Any, str]]]:
        """The model's last message and its tool calls to review: (index, call, config, description)."""
        messages = state["messages"]
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None) if messages else None
        if last is None or not last.tool_calls:
            return None, []
        gated: list[tuple[int, ToolCall, Any, str]] = []
        for idx, tool_call in enumerate(last.tool_calls):
            config = self.interrupt_on.get(tool_call["name"])
            if config is None or not self._should_interrupt(tool_call, config, state, runtime):
                continue
            action, _ = self._create_action_and_config(tool_call, config, state, runtime)
            gated.append((idx, tool_call, config, str(action.get("description", ""))))
        return last, gated

    def _apply(
        self, last: AIMessage, gated: list[tuple[int, ToolCall, Any, str]], answers: list[Decision]
    ) -> dict[str, Any]:
        """What LangChain's middleware returns for the reviewers' decisions (the calls left, the answers)."""
        revised: list[ToolCall] = []
        answered: list[ToolMessage] = []
        edits: dict[str, Any] = {}
        by_index = {idx: (config, answer) for (idx, _, config, _), answer in zip(gated, answers, strict=True)}
        for idx, tool_call in enumerate(last.tool_calls):
            if idx not in by_index:
                revised.append(tool_call)
                continue
            config, answer = by_index[idx]
            decision = hitl_decision(answer, tool_call, list(config["allowed_decisions"]))
            call, message = self._process_decision(decision, tool_call, config)  # type: ignore[arg-type]
            if call is not None:
                revised.append(call)
                if decision["type"] == "edit" and call.get("id"):
                    edits[str(call["id"])] = decision["edited_action"]
            if message is not None:
                answered.append(message)
        last.tool_calls = revised
        return {"messages": [last, *answered], _EDITED: edits}

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        last, gated = self._gated(state, runtime)
        if last is None or not gated:
            return {_EDITED: {}} if last is not None and state.get(_EDITED) else None
        if isinstance(self.bus, SyncBus):  # its own loop holds the asks
            answers = await asyncio.to_thread(self.bus.run, self._hold_all(gated), timeout=self._wait)
        else:
            answers = await self._hold_all(gated)
        return self._apply(last, gated, answers)

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        sync = need_sync(self.bus, "FleetHumanInTheLoopMiddleware on a sync agent")
        last, gated = self._gated(state, runtime)
        if last is None or not gated:
            return {_EDITED: {}} if last is not None and state.get(_EDITED) else None
        return self._apply(last, gated, sync.run(self._hold_all(gated), timeout=self._wait))


async def _held(
    bus: Bus, payload: dict[str, Any], reason: str, session: str | None, agent: str | None, timeout: float
) -> Decision:
    ctx = RequestCtx(session=session, agent=agent, id=bus.port.new_id())
    held: Held = await bus.middleware.asks.hold(
        Ask(reason or f"review {payload['name']}", timeout=timeout), ASKER, None, True, TOOL_CALL, payload, ctx
    )
    return held.decision
