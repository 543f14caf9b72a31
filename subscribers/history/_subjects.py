"""The recorded history's stream."""

from __future__ import annotations

#: The opt-in recorded history of events (``hookbus up --record PATTERN``): a JetStream stream on those patterns.
HISTORY_STREAM = "HOOKBUS_HISTORY"
