"""The trigger engine's queue groups and its status subject."""

from __future__ import annotations

#: The queue group trigger engines share, so each event fires a trigger once.
TRIGGERS_QUEUE = "hookbus-triggers"
#: The queue group of the problems turn (triggers/engine/problems.py): each broken chain is taken once.
PROBLEMS_QUEUE = "hookbus-problems"
#: The trigger engine answers status requests here (``hookbus triggers status``).
TRIGGERS_STATUS = "hookbus.triggers.status"
