"""How a decision changes the payload: patch composition and the tool.result rules.

A chain is walked in order: a patch replaces the payload for the rest of it, a
cancel ends it. On tool.result the veto acts on the output, not on the action:
a cancel hides the output from the model behind a note with the reason, and a
patch carrying ``"remark"`` keeps the output wrapped with the handler's text.
A patch carrying a stage's terminal field (``result`` on tool.call and
llm.request, ``rework`` on assistant.message) ends the chain like a cancel:
later handlers are not asked (docs/stages.md). On tool.call a ``result``
beats a cancel, as agent_os has it: a cancel there does not end the chain, the
later handlers are asked, and a later ``result`` wins over it (the tool runs
in neither case); without one the first cancel stands. Both the module (its own
sub-chain) and the kernel (the whole chain) walk with :class:`ChainRun`, so
the rule lives here only.
"""

from __future__ import annotations

from typing import Any, Final

from bus._core.decisions import CONTINUE, Ask, Cancel, HandlerDecision, Patch
from bus._core.payloads import to_dict
from bus._core.stages import Stage

#: The key a tool.result patch uses to remark on the output without replacing it.
REMARK: Final = "remark"

#: Per stage, the patch field that ends the chain: the first terminal decision in chain order wins.
TERMINAL: Final = {
    Stage.TOOL_CALL.value: "result",
    Stage.LLM_REQUEST.value: "result",
    Stage.ASSISTANT_MESSAGE.value: "rework",
    Stage.TURN_DONE.value: "rework",
}


#: Stages where a later handler's ``result`` beats an earlier cancel (agent_os: result over deny in before_tool_call).
RESULT_BEATS_DENY: Final = frozenset({Stage.TOOL_CALL.value})


def defers_cancel(stage: str) -> bool:
    """Whether a cancel on ``stage`` lets the chain go on, so that a later ``result`` may beat it."""
    return stage in RESULT_BEATS_DENY


def ends_run(stage: str, payload: dict[str, Any]) -> bool:
    """Whether a patched payload carries ``stage``'s terminal field: the chain ends there."""
    terminal = TERMINAL.get(stage)
    return terminal is not None and payload.get(terminal) is not None


def apply_patch(stage: str, patched: dict[str, Any], handler: str) -> dict[str, Any]:
    """The payload a patch leaves for the next handler (tool.result remarks wrapped)."""
    if stage != Stage.TOOL_RESULT or not isinstance(patched.get(REMARK), str):
        return patched
    out = dict(patched)
    remark = out.pop(REMARK)
    out["output"] = wrap_output(str(out.get("output", "")), remark, handler)
    return out


def wrap_output(output: str, remark: str, handler: str) -> str:
    """The original output, kept whole, wrapped with a handler's remark."""
    return f"{output}\n\n[hookbus: remark from {handler}]\n{remark}"


def hide_output(payload: dict[str, Any], reason: str, handler: str) -> dict[str, Any]:
    """A tool.result payload whose output the model must not see: replaced by the reason."""
    return {**payload, "output": f"[hookbus: output hidden by {handler}: {reason}]", "hidden": True}


class ChainRun:
    """One walk along a chain of handlers: the payload as patched so far, and the cancel (or ask) that ended it."""

    __slots__ = ("ask", "cancel", "patched", "payload", "stage")

    def __init__(self, stage: str, payload: dict[str, Any]) -> None:
        self.stage = stage
        self.payload = payload
        self.patched = False
        self.cancel: Cancel | None = None
        #: An Ask stops the run where it stands: the kernel holds it, then goes on after the asking handler.
        self.ask: Ask | None = None

    def take(self, decision: HandlerDecision, handler: str) -> bool:
        """Apply ``handler``'s decision (a cancel is named ``handler``); False once the run is cancelled or decided."""
        if isinstance(decision, Patch):
            self.payload = apply_patch(self.stage, to_dict(decision.payload), handler)
            self.patched = True
            if ends_run(self.stage, self.payload):
                self.cancel = None  # a result beats a cancel before it (only where cancels are deferred)
                return False
            return True
        if isinstance(decision, Cancel):
            if self.cancel is None:  # the first cancel's reason stands unless a result beats it
                self.cancel = Cancel(decision.reason, handler)
            return defers_cancel(self.stage)
        if isinstance(decision, Ask):
            if self.cancel is not None:
                return True  # denied already: nothing to ask an operator about, though a later result may win
            patched = self.payload if self.patched else None
            self.ask = Ask(decision.reason, decision.timeout, decision.on_timeout, handler, patched)
            return False
        return True

    def decision(self) -> HandlerDecision:
        """The run's decision: its cancel or ask, else a patch of the final payload if any patched, else continue.

        An ask carries the payload as patched before it (when a handler of the run patched): the payload it
        asks about.
        """
        if self.cancel is not None:
            return self.cancel
        if self.ask is not None:
            return self.ask
        return Patch(self.payload) if self.patched else CONTINUE
