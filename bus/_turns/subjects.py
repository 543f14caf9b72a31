"""Where turn requests go, who serves them, and where an agent streams its answers."""

from __future__ import annotations

from bus._core.subjects import EVA_DOMAIN

#: Turn requests for an agent go to ``hookbus.turn.<agent>``, served in the queue group turn_queue(agent).
TURN_PREFIX = "hookbus.turn"


def turn_subject(agent: str) -> str:
    """The subject turn requests for ``agent`` go to."""
    return f"{TURN_PREFIX}.{agent}"


def agent_stream_subject(agent: str) -> str:
    """Where the reference runner streams an agent's answers to clients unless told another subject."""
    return f"{EVA_DOMAIN}.stream.{agent}"


def turn_queue(agent: str) -> str:
    """The queue group an agent's replicas share, so each turn request runs once."""
    return f"hookbus-agent-{agent}"
