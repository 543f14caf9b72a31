"""The model as a middleware handler: a hook-turn answers a stage by asking the model.

The model gets the handler's prompt, the stage, its payload and the call's
context (agent, user, session, template, process, depth in the process tree,
event depth, parent, tools, budget, its own config, deadline, request id, bag
inputs: what a module's ``StageCtx`` holds), and exactly
four tools: ``hook_continue``, ``hook_cancel(reason)``, ``hook_patch(payload)`` and
``hook_ask(reason[, timeout])``, which holds the call for an operator (an :class:`~bus.Ask`).
The call goes straight to the chat-completions endpoint, never through
``Bus.intercept``, so no middleware handler, local or remote, sees it (a
hook-turn cannot re-enter the chain). It has a hard timeout. A model that times
out, errors, or does not call exactly one of the four tools is a handler fault:
the handler's declared fail mode decides (continue, or cancel with the cause).

Hook-turns are declared in ``<workspace>/hook_turns.yaml`` like any handler:

    hook_turns:
      - name: judge_shell            # handler name, [A-Za-z0-9_-]+
        stage: tool.call
        match: shell                 # optional matcher (tool names; model names on llm.request)
        prompt: "Block commands that delete or overwrite data outside /tmp."
        fail_closed: true
        timeout: 20                  # seconds, at most the agent's hook_secs (timeout_s, the older key, too)
        before: []                   # optional ordering references
        after: []
        model: gpt-4o-mini           # optional; default: the agent's model
        config: {}                   # optional: the handler's own settings, shown to the model as its config

They are expensive: keep them to one stage and a narrow matcher.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
import orjson

from bus._core.decisions import ASK_TIMEOUT_MAX, Ask, Cancel, Continue, HandlerDecision, Patch
from bus._core.errors import ConfigError, HookbusError
from bus._core.schema import convert
from bus._core.stages import validate_stage
from bus._core.subjects import TOKEN_RE
from bus._middleware.handler.module import StageCtx
from bus._module import Module
from bus._runtime.config_files import parse_entries, read_yaml
from triggers.agent._config_schema import HOOK_TURN_TIMEOUT, HookTurn
from triggers.agent._errors import HookTurnError
from triggers.agent._llm import ChatClient

FILE_NAME: Final = "hook_turns.yaml"
DEFAULT_TIMEOUT: Final = HOOK_TURN_TIMEOUT

_INSTRUCTIONS: Final = (
    "You are a middleware handler of an AI agent. You are shown what the agent is about to do at one "
    "stage, as JSON. Decide by calling exactly one tool: hook_continue to let it pass unchanged, "
    "hook_cancel with a reason to forbid it, hook_patch with the full replacement payload, or hook_ask "
    "with a reason when a person should decide. "
    "Do not answer in text.\n\nYour rule:\n"
)

HOOK_TOOLS: Final = [
    {
        "type": "function",
        "function": {
            "name": "hook_continue",
            "description": "Let the action pass unchanged.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "hook_cancel",
            "description": "Forbid the action. The agent and the journal see the reason.",
            "parameters": {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "hook_patch",
            "description": "Let the action pass with this payload instead (the whole payload).",
            "parameters": {"type": "object", "properties": {"payload": {"type": "object"}}, "required": ["payload"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "hook_ask",
            "description": "Hold the action until an operator allows, denies or edits it (they see the reason).",
            "parameters": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string"},
                    "timeout": {"type": "number", "description": "seconds to wait for the answer"},
                },
                "required": ["reason"],
            },
        },
    },
]
_TOOL_NAMES: Final = ("hook_continue", "hook_cancel", "hook_patch", "hook_ask")


@dataclass(frozen=True)
class HookTurnSpec:
    name: str
    stage: str
    prompt: str
    match: tuple[str, ...] | None = None
    fail_closed: bool = False
    timeout: float = DEFAULT_TIMEOUT
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    model: str | None = None
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    source: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def identity_text(self) -> str:
        """What this handler does, for its trust identity: a changed prompt or model is a changed handler."""
        what: dict[str, Any] = {"prompt": self.prompt, "model": self.model}
        if self.config:  # only when given: a hook-turn without config keeps its identity
            what["config"] = self.config
        return orjson.dumps(what, option=orjson.OPT_SORT_KEYS).decode()


def decision_from(completion_calls: list[Any]) -> HandlerDecision:
    """The decision the model's tool calls express; HookTurnError unless exactly one hook_* call."""
    names = [call.name for call in completion_calls]
    if len(completion_calls) != 1 or names[0] not in _TOOL_NAMES:
        raise HookTurnError(
            f"the model must call exactly one of {', '.join(_TOOL_NAMES)}; it called {names or 'nothing'}"
        )
    call = completion_calls[0]
    if call.name == "hook_continue":
        return Continue()
    if call.name == "hook_cancel":
        reason = call.arguments.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise HookTurnError("hook_cancel without a reason")
        return Cancel(reason)
    if call.name == "hook_ask":
        return _ask(call.arguments)
    payload = call.arguments.get("payload")
    if not isinstance(payload, dict):
        raise HookTurnError("hook_patch without an object 'payload'")
    return Patch(payload)


def _ask(arguments: dict[str, Any]) -> Ask:
    """hook_ask's arguments as an Ask: a reason, and a wait within what an ask may have (else the default)."""
    reason = arguments.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise HookTurnError("hook_ask without a reason")
    timeout = arguments.get("timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= ASK_TIMEOUT_MAX:
        return Ask(reason)
    return Ask(reason, timeout=float(timeout))


def context_of(ctx: StageCtx | None) -> dict[str, Any]:
    """The call's context as the model is shown it: the fields every kind of handler gets (no bus)."""
    if ctx is None:
        return {}
    return {
        "handler": ctx.handler,
        "agent": ctx.agent,
        "user": ctx.user,
        "session": ctx.session,
        "template": ctx.template,
        "process": ctx.process,
        "depth": ctx.depth,
        "event_depth": ctx.event_depth,
        "parent": ctx.parent,
        "tools": None if ctx.tools is None else list(ctx.tools),
        "budget_total": ctx.budget_total,
        "budget_spent": ctx.budget_spent,
        "budget_remaining": ctx.budget_remaining(),
        "budget_unit": ctx.budget_unit,
        "config": dict(ctx.config),
        "deadline": ctx.deadline,
        "request_id": ctx.request_id,
        "inputs": dict(ctx.inputs),
    }


async def ask_model(
    client: ChatClient, spec: HookTurnSpec, stage: str, payload: dict[str, Any], ctx: StageCtx | None = None
) -> HandlerDecision:
    """One hook-turn: the prompt, the stage, its payload and the call's context, the four tools, a hard timeout."""
    shown = {"stage": stage, "payload": payload, "context": context_of(ctx)}
    messages = [
        {"role": "system", "content": _INSTRUCTIONS + spec.prompt},
        {"role": "user", "content": orjson.dumps(shown, default=str).decode()},
    ]
    completion = await asyncio.wait_for(
        client.complete(messages, tools=HOOK_TOOLS, tool_choice="required", model=spec.model, timeout=spec.timeout),
        timeout=spec.timeout,
    )
    return decision_from(completion.tool_calls)


def build_module(name: str, specs: list[HookTurnSpec], client: ChatClient) -> Module:
    """A Module whose handlers are the hook-turns (serve it like any module)."""
    module = Module(name)
    for spec in specs:

        async def handler(
            stage: str, payload: dict[str, Any], ctx: StageCtx, spec: HookTurnSpec = spec
        ) -> HandlerDecision:
            return await ask_model(client, spec, stage, payload, ctx)

        module.stage(
            spec.stage,
            fail_closed=spec.fail_closed,
            timeout=spec.timeout,
            before=spec.before,
            after=spec.after,
            match=spec.match,
            name=spec.name,
            code=spec.identity_text(),
            config=spec.config,
        )(handler)
    return module


def load(path: Path) -> list[HookTurnSpec]:
    """Parse and validate hook_turns.yaml; every problem names the file, the entry and the field."""
    doc = read_yaml(path, missing_ok=False)
    return parse_entries(doc, str(path), "hook_turns", "hook-turn", _parse_one, lambda spec: spec.name, empty_ok=False)


def _strings(value: str | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _timeout(entry: HookTurn, where: str) -> float:
    """The entry's ``timeout`` in seconds; ``timeout_s`` is its older spelling, read when it is the one given."""
    if entry.timeout is not msgspec.UNSET and entry.timeout_s is not msgspec.UNSET:
        raise ConfigError(f"{where}: give 'timeout' (seconds) or its older spelling 'timeout_s', not both")
    if entry.timeout is not msgspec.UNSET:
        return entry.timeout
    return entry.timeout_s if entry.timeout_s is not msgspec.UNSET else DEFAULT_TIMEOUT


def _parse_one(item: Any, where: str) -> HookTurnSpec:
    """One entry, checked against the schema (triggers.agent._config_schema.HookTurn) and named by its name."""
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a mapping")
    name = item.get("name")
    if isinstance(name, str) and TOKEN_RE.fullmatch(name):
        where = f"{where.rsplit(':', 1)[0]}: hook-turn {name!r}"
    entry = convert(item, HookTurn, where, ConfigError)
    try:
        stage = validate_stage(entry.stage)
    except HookbusError as exc:
        raise ConfigError(f"{where}: field 'stage': {exc}") from None
    return HookTurnSpec(
        name=entry.name,
        stage=stage,
        prompt=entry.prompt,
        match=None if entry.match is msgspec.UNSET else _strings(entry.match),
        fail_closed=entry.fail_closed,
        timeout=_timeout(entry, where),
        before=_strings(entry.before),
        after=_strings(entry.after),
        model=entry.model,
        config=dict(entry.config),
        source=dict(item),
    )
