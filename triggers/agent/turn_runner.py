"""The reference turn runner: what ``hookbus agent`` runs for each turn request.

A turn: ``agent.spawn`` (a cancel refuses the turn), ``agent_start``,
``user.message`` (rewrite or reject the prompt); then rounds of [``context.evict``
when the window overflows, ``llm.request`` (a patch with ``result`` skips the
model), ``llm_request``, the model call streamed through ``llm.token`` to the
clients' subject, ``llm_response``, and on a transient failure ``llm.retry``
and the next attempt (``llm.request`` again); for each tool call the model asks
for: ``tool_call_start``, ``tool.call`` (``result`` short-circuits the tool),
``tool.exec`` with the resolved command, the tool, ``tool.result``,
``tool_call``] until the model answers in text; ``assistant.message`` judges
the answer (suppress, replace, or rework up to MAX_REWORK_ROUNDS times), or,
with the ``job_done`` tool offered, ``turn.done`` judges the completion the
model calls it with (a veto hands the correction back as its result); then
``loop.end``, ``turn.end``, ``turn.after``, ``turn_complete``, ``agent_end``,
``agent.terminate`` and ``eva.turn.completed`` with the answer. A failure asks
``agent.error``, emits ``error``, ``agent_end`` (success false), asks
``agent.terminate`` and emits ``eva.turn.failed``.
Everything runs at the request's depth, so what a triggered turn emits
carries the recursion counter on. docs/stages.md describes every point.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Final

from bus._client import Bus
from bus._core.decisions import Cancel, Decision, Patch
from bus._core.stages import Stage, phase
from bus._journal.entries import PROCESS, JournalEntry, publish_entry
from bus._turns.errors import TurnFailed
from bus._turns.server import TurnRequest
from bus._turns.subjects import agent_stream_subject
from triggers.agent import _completion as completions
from triggers.agent import _context as context
from triggers.agent import _points as points
from triggers.agent._budget_view import budget_fields
from triggers.agent._budgets import BudgetBook, Usage
from triggers.agent._errors import LLMError
from triggers.agent._llm import ChatClient, ChatToolCall, Completion, request_body
from triggers.agent._stream import TokenStream
from triggers.agent._tools import TOOLS, Tool

log = logging.getLogger("hookbus.agent")

MAX_ROUNDS: Final = 6
#: Times per turn an assistant.message handler may send the answer back for rework; then the last answer stands.
MAX_REWORK_ROUNDS: Final = 2
#: Tool output longer than this is cut before it is put in an event (the model gets it whole).
_EVENT_OUTPUT_CHARS: Final = 4000
#: The longest backoff between two attempts unless an llm.retry handler asks for another delay.
_MAX_BACKOFF_S: Final = 10.0


@dataclass(frozen=True)
class TurnRunnerSettings:
    """How the runner talks to its model and its clients."""

    #: Stream answers (``stream: true``) through llm.token to ``stream_subject``.
    stream: bool = True
    #: Where streamed text goes; None: ``eva.stream.<agent>``.
    stream_subject: str | None = None
    #: The context window in approximate tokens; None: no eviction.
    context_tokens: int | None = None
    max_tokens: int | None = None
    #: The budgets' group layer key; None: the agent's name.
    group: str | None = None
    #: Offer the model the ``job_done`` tool; its completions are judged by ``turn.done``.
    job_done: bool = False


@dataclass
class _Turn:
    """One turn's state: its request, middleware context and token stream."""

    request: TurnRequest
    ctx: dict[str, Any]
    stream: TokenStream | None
    rounds: int = 0
    reworks: int = 0
    #: How the loop ended: ``answer``, ``suppressed`` or ``job_done`` (loop.end's reason).
    ended: str = "answer"
    #: The user message as user.message left it (turn.after's question).
    question: str = ""


class TurnRunner:
    """Runs turns for one agent against one chat-completions endpoint."""

    def __init__(
        self,
        bus: Bus,
        agent: str,
        client: ChatClient,
        *,
        tools: dict[str, Tool] | None = None,
        system: str | None = None,
        settings: TurnRunnerSettings | None = None,
        budgets: BudgetBook | None = None,
    ) -> None:
        self.bus = bus
        self.agent = agent
        self.client = client
        self.tools = TOOLS if tools is None else tools
        self.system = system
        self.settings = settings or TurnRunnerSettings()
        self.stream_subject = self.settings.stream_subject or agent_stream_subject(agent)
        self.budgets = budgets

    async def _emit(self, name: str, payload: dict[str, Any], request: TurnRequest) -> None:
        await self.bus.emit(f"prx.lifecycle.{name}", payload, session_id=request.session_id)

    async def _ask_point(self, turn: _Turn, stage: Stage, payload: dict[str, Any]) -> Decision:
        return await self.bus.intercept(stage, payload, ctx=turn.ctx)

    async def handle(self, request: TurnRequest) -> str:
        """Run one turn; returns the answer, raises TurnFailed."""
        ctx = {"session": request.session_id, "agent": self.agent, "process": PROCESS, **self._run_ctx(request)}
        await self._budget_ctx(ctx, request)
        base = {"agent": self.agent, "turn": request.id}
        spawn = await self.bus.intercept(
            Stage.AGENT_SPAWN, {**base, "trigger": request.trigger, "depth": request.depth}, ctx=ctx
        )
        if isinstance(spawn, Cancel):
            await self._failed(request, f"agent.spawn cancelled: {spawn.reason}")
            raise TurnFailed(f"agent.spawn cancelled: {spawn.reason}")
        stream = TokenStream(self.bus, self.stream_subject, base, ctx) if self.settings.stream else None
        turn = _Turn(request, ctx, stream)
        await self._emit("agent_start", {"agent": self.agent, "session": request.session_id or request.id}, request)
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        try:
            turn.question = await self._user_message(turn)
            messages.append({"role": "user", "content": turn.question})
            answer = await self._rounds(turn, messages)
            await self._observe(turn, Stage.LOOP_END, {"reason": turn.ended, "rounds": turn.rounds})
            answer = await self._end(turn, answer, messages)
            await self._observe(
                turn, Stage.TURN_AFTER, {"question": turn.question, "answer": answer, "rounds": turn.rounds}
            )
        except (TurnFailed, LLMError) as exc:
            component = "llm" if isinstance(exc, LLMError) else "agent"
            await self._observe(turn, Stage.AGENT_ERROR, {"error": str(exc), "component": component})
            await self._emit("error", {"component": component, "message": str(exc)}, request)
            await self._emit("agent_end", {"success": False, "messages_count": len(messages)}, request)
            await self._terminate(turn, str(exc))
            await self._failed(request, str(exc))
            raise TurnFailed(str(exc)) from exc
        finally:
            if stream is not None:
                await stream.close()
        await self._emit("turn_complete", {}, request)
        await self._emit("agent_end", {"success": True, "messages_count": len(messages)}, request)
        await self._terminate(turn, None)
        await self.bus.emit(
            "eva.turn.completed",
            {"agent": self.agent, "trigger": request.trigger, "turn": request.id, "answer": answer},
            session_id=request.session_id,
        )
        return answer

    def _run_ctx(self, request: TurnRequest) -> dict[str, Any]:
        """The run's place in the process tree and the tool allowlist, as every handler is told (claims)."""
        tools = [*self.tools, *([completions.JOB_DONE] if self.settings.job_done else [])]
        return {"parent": request.parent, "spawn_depth": request.spawn_depth, "tools": tools}

    async def _budget_ctx(self, ctx: dict[str, Any], request: TurnRequest) -> None:
        """The budget every handler is told: read at the turn's start, before each model call, after its charge."""
        ctx.update(await budget_fields(self.budgets, self._budget_keys(request)))

    async def _observe(self, turn: _Turn, stage: Stage, fields: dict[str, Any]) -> None:
        """An observed point (loop.end, turn.after, agent.error): its decisions are journaled, nothing changes."""
        await self._ask_point(turn, stage, {"agent": self.agent, "turn": turn.request.id, **fields})

    async def _failed(self, request: TurnRequest, error: str) -> None:
        await self.bus.emit(
            "eva.turn.failed",
            {"agent": self.agent, "trigger": request.trigger, "turn": request.id, "error": error},
            session_id=request.session_id,
        )

    async def _user_message(self, turn: _Turn) -> str:
        """The prompt as user.message leaves it; a cancel rejects it with the reason."""
        payload = {"agent": self.agent, "turn": turn.request.id, "content": turn.request.prompt}
        decision = await self._ask_point(turn, Stage.USER_MESSAGE, payload)
        if isinstance(decision, Cancel):
            raise TurnFailed(f"user message rejected: {decision.reason}")
        if isinstance(decision, Patch):
            return points.kept("user.message", decision.payload, "content", turn.request.prompt)
        return turn.request.prompt

    async def _end(self, turn: _Turn, answer: str, messages: list[dict[str, Any]]) -> str:
        """turn.end: a patch replaces the answer returned, a cancel fails the turn."""
        payload = {
            "agent": self.agent,
            "turn": turn.request.id,
            "answer": answer,
            "rounds": turn.rounds,
            "messages_count": len(messages),
        }
        decision = await self._ask_point(turn, Stage.TURN_END, payload)
        if isinstance(decision, Cancel):
            raise TurnFailed(f"turn.end cancelled: {decision.reason}")
        if isinstance(decision, Patch):
            return points.kept("turn.end", decision.payload, "answer", answer)
        return answer

    async def tick(self) -> None:
        """Emit eva.spend.day for the day that ended, if one did (the CLI calls this every minute too)."""
        report = self.budgets.roll() if self.budgets is not None else None
        if report is not None:
            await self.bus.emit("eva.spend.day", {"agent": self.agent, **report})

    def _budget_keys(self, request: TurnRequest) -> dict[str, str | None]:
        """Each layer's key; the user is the vouched publisher of the turn's event, never a payload field."""
        group = self.settings.group or self.agent
        return {"session": request.session_id or request.id, "group": group, "user": request.publisher}

    async def _check_budget(self, turn: _Turn) -> None:
        """An exhausted layer cancels llm.request (journaled as the budget's cancel) before any handler is asked."""
        await self.tick()
        await self._budget_ctx(turn.ctx, turn.request)
        reason = await self.budgets.exhausted(self._budget_keys(turn.request)) if self.budgets is not None else None
        if reason is not None:
            await self._note(turn, Stage.LLM_REQUEST, "cancel", reason, who="budget")
            raise TurnFailed(f"llm.request cancelled: {reason}")

    async def _charge(self, turn: _Turn, model: str, messages: list[dict[str, Any]], completion: Completion) -> None:
        """Book a model call: the provider's usage, else an approximate count; thresholds crossed are emitted."""
        if self.budgets is None:
            return
        spent = Usage.reported(completion.raw.get("usage"))
        if spent is None:
            answer = [{"content": completion.content}, *[vars(call) for call in completion.tool_calls]]
            spent = Usage(context.tokens(messages), context.tokens(answer))
        for crossed in await self.budgets.charge(self._budget_keys(turn.request), model, spent):
            await self.bus.emit(
                "eva.budget.threshold", {"agent": self.agent, **crossed}, session_id=turn.ctx["session"]
            )
        await self._budget_ctx(turn.ctx, turn.request)

    async def _terminate(self, turn: _Turn, error: str | None) -> None:
        """agent.terminate: observed (its decisions are journaled), the turn's outcome is already set."""
        payload = {"agent": self.agent, "turn": turn.request.id, "success": error is None, "error": error}
        await self._ask_point(turn, Stage.AGENT_TERMINATE, payload)

    async def _rounds(self, turn: _Turn, messages: list[dict[str, Any]]) -> str:
        while turn.rounds < MAX_ROUNDS + turn.reworks:
            turn.rounds += 1
            completion = await self._ask(turn, messages)
            if completion.tool_calls:
                messages.append(completion.raw["choices"][0]["message"])
                done: str | None = None
                for call in completion.tool_calls:
                    if call.name == completions.JOB_DONE and self.settings.job_done:
                        output, finished = await self._job_done(turn, call)
                        done = finished if finished is not None else done
                    else:
                        output = await self._tool(turn, call)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
                if done is not None:
                    turn.ended = "job_done"
                    self._replace(turn, done)
                    return done
                continue
            answer, feedback = await self._judge(turn, completion.content or "")
            if feedback is None:
                if answer is not None:
                    messages.append({"role": "assistant", "content": answer})
                else:
                    turn.ended = "suppressed"
                return answer or ""
            messages.append({"role": "user", "content": feedback})
        raise TurnFailed(f"no answer after {MAX_ROUNDS} rounds of tool calls")

    async def _job_done(self, turn: _Turn, call: ChatToolCall) -> tuple[str, str | None]:
        """turn.done on a job_done call: (the tool message, the completion that ends the loop or None)."""
        result = completions.completion_of(call.arguments)
        payload = {"agent": self.agent, "turn": turn.request.id, "result": result, "round": turn.reworks}
        judged = completions.verdict(await self._ask_point(turn, Stage.TURN_DONE, payload), result)
        if judged.result is not None:
            return "done", judged.result
        correction = judged.correction or ""
        if turn.reworks < MAX_REWORK_ROUNDS:
            turn.reworks += 1
            return completions.sent_back(correction), None
        await self._note(turn, Stage.TURN_DONE, "rework_limit", completions.limit_cause(correction, MAX_REWORK_ROUNDS))
        return "done", result

    async def _judge(self, turn: _Turn, answer: str) -> tuple[str | None, str | None]:
        """assistant.message: (the answer that stands or None if suppressed, rework feedback or None)."""
        payload = {"agent": self.agent, "turn": turn.request.id, "content": answer, "round": turn.reworks}
        decision = await self._ask_point(turn, Stage.ASSISTANT_MESSAGE, payload)
        if isinstance(decision, Cancel):
            self._replace(turn, "")
            return None, None
        if not isinstance(decision, Patch):
            return answer, None
        feedback = points.text_field("assistant.message", decision.payload, "rework")
        if feedback is not None:
            if turn.reworks < MAX_REWORK_ROUNDS:
                turn.reworks += 1
                self._replace(turn, "")
                return None, feedback
            cause = f"rework refused after {MAX_REWORK_ROUNDS} rounds: the answer stands"
            await self._note(turn, Stage.ASSISTANT_MESSAGE, "rework_limit", cause)
            return answer, None
        replaced = points.text_field("assistant.message", decision.payload, "answer")
        if replaced is None:  # no answer field: a content changed in place replaces the answer too
            replaced = points.kept("assistant.message", decision.payload, "content", answer)
        if replaced == answer:
            return answer, None
        self._replace(turn, replaced)
        return replaced, None

    def _replace(self, turn: _Turn, text: str) -> None:
        if turn.stream is not None:
            turn.stream.replace(text)

    async def _note(self, turn: _Turn, stage: str, decision: str, cause: str, who: str = "runner") -> None:
        """A journal entry of the runner's own (the rework limit, a budget's cancel): kind middleware."""
        entry = JournalEntry(
            "middleware", stage, phase(stage), f"agent:{self.agent}:{who}", decision, cause,
            session=turn.request.session_id, agent=self.agent, depth=turn.request.depth,
        )  # fmt: skip
        await publish_entry(self.bus.port, entry)

    async def _evict(self, turn: _Turn, messages: list[dict[str, Any]]) -> None:
        """context.evict when the window overflows: the summary kept stands for what left."""
        window = self.settings.context_tokens
        if window is None:
            return
        head, evicted = context.split(messages, window)
        if not evicted:
            return
        rest = messages[len(head) + len(evicted) :]
        summaries = [m for m in evicted if context.is_summary(m)]
        current = str(summaries[-1]["content"])[len(context.SUMMARY_PREFIX) :] if summaries else ""
        payload = {
            "agent": self.agent,
            "turn": turn.request.id,
            "evicted": [m for m in evicted if not context.is_summary(m)],
            "summary": current,
            "tokens": context.tokens(messages),
            "window_tokens": window,
        }
        decision = await self._ask_point(turn, Stage.CONTEXT_EVICT, payload)
        if isinstance(decision, Cancel):
            return
        summary = current
        if isinstance(decision, Patch):
            summary = points.kept("context.evict", decision.payload, "summary", current)
        messages[:] = [*head, *([context.summary_message(summary)] if summary else []), *rest]

    async def _ask(self, turn: _Turn, messages: list[dict[str, Any]]) -> Completion:
        """One model call: llm.request before every attempt, llm.retry before every retry."""
        model = self.client.model
        offered = [*self.tools.values(), *([completions.JOB_DONE_TOOL] if self.settings.job_done else [])]
        tools = [tool.schema() for tool in offered] or None
        attempt = 1
        while True:
            await self._check_budget(turn)
            await self._evict(turn, messages)
            call: dict[str, Any] = {
                "model": model,
                "messages": messages,
                "tools": tools,
                "max_tokens": self.settings.max_tokens,
                "temperature": None,
                "attempt": attempt,
            }
            decision = await self._ask_point(turn, Stage.LLM_REQUEST, call)
            if isinstance(decision, Cancel):
                raise TurnFailed(f"llm.request cancelled: {decision.reason}")
            if isinstance(decision, Patch):
                call = points.llm_call(decision.payload)
                if call.get("result") is not None:
                    completion = points.cached_result(call["result"])
                    if turn.stream is not None and completion.content:
                        turn.stream.push(completion.content, not completion.tool_calls)
                    return completion
            messages[:] = call["messages"]
            streamed = [False]
            try:
                completion = await self._call_model(turn, call, streamed)
                await self._charge(turn, str(call["model"]), messages, completion)
                return completion
            except LLMError as exc:
                if not exc.transient or attempt >= self.client.attempts:
                    raise
                delay, model = await self._retry(turn, exc, attempt, str(call["model"]), streamed[0])
            attempt += 1
            await asyncio.sleep(delay)

    async def _retry(self, turn: _Turn, exc: LLMError, attempt: int, model: str, mid_stream: bool) -> tuple[float, str]:
        """llm.retry: (delay, model) for the next attempt; a cancel fails the turn with the reason."""
        delay = min(self.client.backoff * 2 ** (attempt - 1), _MAX_BACKOFF_S)
        payload = {
            "model": model,
            "attempt": attempt,
            "max_attempts": self.client.attempts,
            "error": str(exc),
            "delay_s": delay,
            "during": "stream" if mid_stream else "connect",
        }
        decision = await self._ask_point(turn, Stage.LLM_RETRY, payload)
        if isinstance(decision, Cancel):
            raise TurnFailed(f"llm.retry cancelled: {decision.reason} (after {exc})")
        if isinstance(decision, Patch):
            delay, model = points.retry_choice(decision.payload, delay, model)
        message = f"{exc}; retry {attempt} of {self.client.attempts - 1} in {delay:.1f}s"
        await self._emit("error", {"component": "llm", "message": message}, turn.request)
        if mid_stream:
            self._replace(turn, "")  # the retried answer streams again from its start
        return delay, model

    async def _call_model(self, turn: _Turn, call: dict[str, Any], streamed: list[bool]) -> Completion:
        request = turn.request
        provider, model = self.client.provider, str(call["model"])
        messages = call["messages"]
        await self._emit(
            "llm_request", {"provider": provider, "model": model, "messages_count": len(messages)}, request
        )
        body = request_body(
            messages, model, tools=call["tools"], temperature=call.get("temperature"), max_tokens=call.get("max_tokens")
        )
        stream = turn.stream

        def on_chunk(text: str, tool_asked: bool) -> None:
            streamed[0] = True
            assert stream is not None
            stream.push(text, not tool_asked)

        try:
            if stream is not None:
                completion = await self.client.stream(body, on_chunk)
            else:
                completion = await self.client.once(body)
        except LLMError:
            await self._emit(
                "llm_response", {"provider": provider, "model": model, "duration_ms": 0, "success": False}, request
            )
            raise
        await self._emit(
            "llm_response",
            {"provider": provider, "model": model, "duration_ms": round(completion.duration_ms, 1), "success": True},
            request,
        )
        return completion

    async def _tool(self, turn: _Turn, call: ChatToolCall) -> str:
        request = turn.request
        arguments = call.arguments
        await self._emit("tool_call_start", {"tool": call.name, "arguments": arguments}, request)
        decision = await self._ask_point(turn, Stage.TOOL_CALL, {"name": call.name, "input": arguments})
        result = points.text_field("tool.call", decision.payload, "result") if isinstance(decision, Patch) else None
        if result is not None:
            output, success = result, True
        elif isinstance(decision, Cancel):
            output, success = f"cancelled by middleware: {decision.reason}", False
        else:
            if isinstance(decision, Patch):
                arguments = points.tool_input("tool.call", decision.payload, arguments)
            output, success = await self._exec(turn, call.name, arguments)
        await self._emit(
            "tool_call", {"tool": call.name, "success": success, "output": output[:_EVENT_OUTPUT_CHARS]}, request
        )
        return output

    async def _exec(self, turn: _Turn, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """tool.exec with the resolved command, the tool, then tool.result on what it returned."""
        tool = self.tools.get(name)
        if tool is None:
            return f"no such tool: {name}", False
        payload = {"name": name, "input": arguments, "command": tool.command(arguments)}
        decision = await self._ask_point(turn, Stage.TOOL_EXEC, payload)
        if isinstance(decision, Cancel):
            return f"cancelled by middleware at tool.exec: {decision.reason}", False
        if isinstance(decision, Patch):
            arguments = points.tool_input("tool.exec", decision.payload, arguments)
        try:
            ran = tool.run(arguments)
            output, success = (await ran if inspect.isawaitable(ran) else ran), True
        except Exception as exc:
            output, success = f"{type(exc).__name__}: {exc}", False
        result = {"name": name, "output": output, "is_error": not success}
        judged = await self._ask_point(turn, Stage.TOOL_RESULT, result)
        if isinstance(judged, Cancel):
            hidden = judged.payload or {}
            return str(hidden.get("output") or f"[output hidden: {judged.reason}]"), success
        if isinstance(judged, Patch):
            output = points.kept("tool.result", judged.payload, "output", output)
        return output, success
