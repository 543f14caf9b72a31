"""What the journal's writers put in ``decision``: middleware outcomes and decisions, hook runs, plugins' log lines,
triggers, operators.

``hookbus journal --decision`` and the console's journal search refuse anything else, naming the valid ones.
"""

from __future__ import annotations

from bus._middleware.faults import Outcome
from bus._operator import OPERATOR_DECISIONS
from bus._sandbox.outcome import HookOutcome
from bus._switching import SWITCH_DECISIONS
from subscribers.plugins._plugin_log import DROPPED, LEVELS


def known_decisions() -> list[str]:
    """Every decision a journal writer records, sorted."""
    written = {"continue", "cancel", "patch", "denied", "fired", "suppressed", "reordered"}  # reordered: the bag's
    written |= {"would_cancel", "would_patch", "would_ask", "would_fail"}  # shadow rules and handlers (docs/rules.md)
    written |= {*OPERATOR_DECISIONS, *SWITCH_DECISIONS, *LEVELS, DROPPED}  # a plugin's log lines: their level
    return sorted({*written, *(o.value for o in Outcome), *(o.value for o in HookOutcome)})
