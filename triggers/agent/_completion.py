"""The completion guardrail: the ``job_done`` tool and what ``turn.done`` makes of a completion.

With ``hookbus agent --job-done`` the runner offers its model a ``job_done``
tool: the model calls it with the work's ``result`` to end the loop. Before
the loop ends, ``turn.done`` judges the completion (agent_os's completion veto):
a cancel, or a patch with ``rework``, does not end it; the correction goes back
to the model as the result of its ``job_done`` call, at most
``MAX_REWORK_ROUNDS`` times per turn (the reworks ``assistant.message`` asked
count too), after which the completion stands. A patch with ``result``
replaces the completion. docs/stages.md describes the point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from bus._core.decisions import Cancel, Decision, Patch
from triggers.agent import _points as points
from triggers.agent._tools import Tool

#: The tool the model calls to say the work is done.
JOB_DONE: Final = "job_done"


def _no_run(arguments: dict[str, Any]) -> str:
    raise RuntimeError("job_done is the runner's own: it ends the loop, it is never run as a tool")


#: The completion tool as the model is offered it.
JOB_DONE_TOOL: Final = Tool(
    JOB_DONE,
    "Call when the work is complete, with the result for the user. A reviewer may send it back with a correction.",
    {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]},
    _no_run,
)


@dataclass(frozen=True)
class Verdict:
    """What ``turn.done`` left: the completion that ends the loop, or the correction handed back."""

    result: str | None  # the completion standing; None: sent back
    correction: str | None  # what the model gets as job_done's result when sent back


def completion_of(arguments: dict[str, Any]) -> str:
    """The ``result`` the model gave job_done (a missing or non-string one reads as its text form)."""
    value = arguments.get("result")
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def verdict(decision: Decision, result: str) -> Verdict:
    """Read turn.done's decision: a cancel's reason or a patch's ``rework`` sends the completion back."""
    if isinstance(decision, Cancel):
        return Verdict(None, decision.reason or "the completion was rejected")
    if not isinstance(decision, Patch):
        return Verdict(result, None)
    rework = points.text_field("turn.done", decision.payload, "rework")
    if rework is not None:
        return Verdict(None, rework)
    return Verdict(points.kept("turn.done", decision.payload, "result", result), None)


def sent_back(correction: str) -> str:
    """The tool message the model gets for a job_done sent back."""
    return f"job_done rejected, the work is not complete: {correction}"


def limit_cause(correction: str, limit: int) -> str:
    """The journal's cause when a correction comes after the limit: the completion stands."""
    return f"rework refused after {limit} rounds: the completion stands (correction was: {correction[:200]})"
