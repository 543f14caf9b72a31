"""The OpenAI Agents SDK's approvals as fleet asks: ``needs_approval`` tools answered by an operator anywhere.

A tool made with ``needs_approval`` stops the run: ``Runner.run`` returns a
result whose ``interruptions`` are the calls waiting for approval.
``approve_from_fleet(result, bus)`` holds each of them as an ask in
``hookbus_asks`` (stage ``tool.call``, handler ``openai-agents.needs_approval``,
the exact arguments and their hash), waits for the answers (``hookbus allow /
deny / edit``, the console, a signed link) and returns the run's ``RunState``
with each call approved or rejected, to resume with ``Runner.run(agent, state)``:

- allow: ``state.approve(item)``;
- deny: ``state.reject(item, rejection_message=...)``, the model reads the operator's reason;
- edit: a rejection naming the arguments the operator approved instead (the SDK
  cannot change a pending call's arguments; the model calls again with them,
  and that call is asked about again unless a rule answers it);
- no answer by the deadline: ``on_timeout`` (default cancel, a rejection).

The asks are held together, so operators answer them in any order. Needs
``openai-agents``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import orjson
from agents import RunState
from agents.items import ToolApprovalItem

from bus._client import Bus
from bus._core.decisions import Ask, Cancel, Decision, Patch
from bus._core.middleware_schema import RequestCtx
from bus._middleware.kernel.asking import Held

__all__ = ["ASKER", "approve_from_fleet", "decide"]

#: The handler name the SDK's approvals are asked under (what a standing rule names).
ASKER: Final = "openai-agents.needs_approval"
TOOL_CALL: Final = "tool.call"


def _payload(item: ToolApprovalItem) -> dict[str, Any]:
    raw = item.raw_item
    arguments = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        parsed = {"arguments": arguments}
    payload: dict[str, Any] = {"name": item.name or "", "input": parsed if isinstance(parsed, dict) else {}}
    if call_id:
        payload["id"] = str(call_id)
    return payload


def decide(state: RunState[Any, Any], item: ToolApprovalItem, decision: Decision) -> None:
    """Apply one answer to the run state: approve, or reject with the reason the model reads."""
    if isinstance(decision, Cancel):
        state.reject(item, rejection_message=f"refused by an operator: {decision.reason}")
    elif isinstance(decision, Patch):
        changed = orjson.dumps(decision.payload.get("input", decision.payload)).decode()
        state.reject(item, rejection_message=f"an operator approved {item.name} only with the arguments {changed}")
    else:
        state.approve(item)


async def _hold(
    bus: Bus, item: ToolApprovalItem, session_id: str | None, agent: str | None, timeout: float, reason: str
) -> Decision:
    ctx = RequestCtx(session=session_id, agent=agent or item.agent.name, id=bus.port.new_id())
    asks = bus.middleware.asks
    held: Held = await asks.hold(Ask(reason, timeout=timeout), ASKER, None, True, TOOL_CALL, _payload(item), ctx)
    return held.decision


async def approve_from_fleet(
    result: Any,
    bus: Bus,
    *,
    session_id: str | None = None,
    agent: str | None = None,
    timeout: float = 300.0,
    reason: str = "the tool needs an approval",
) -> RunState[Any, Any]:
    """The state of an interrupted run with each pending approval answered from the fleet (see the module doc).

    ``result`` is what ``Runner.run`` returned (or a ``RunState`` already); a run with no
    interruptions comes back as its state, nothing asked.
    """
    state: RunState[Any, Any] = result if isinstance(result, RunState) else result.to_state()
    items = state.get_interruptions()
    decisions = await asyncio.gather(
        *(_hold(bus, item, session_id, agent, timeout, f"{reason}: {item.name}") for item in items)
    )
    for item, decision in zip(items, decisions, strict=True):
        decide(state, item, decision)
    return state
