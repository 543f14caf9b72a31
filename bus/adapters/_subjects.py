"""Where agent-hook relays ask ``hookbus up`` to map a hook input, and who asked."""

from __future__ import annotations

from bus._core.errors import SubjectError
from bus._core.subjects import TOKEN_RE, validate_subject

#: Agent-hook relays (docs/integrations.md): ``hookbus claude-hook`` and ``codex-hook`` ask ``hookbus up`` to
#: run a hook input's mapping on ``hookbus.adapter.<flavor>.<user>``, served in the queue group ADAPTER_QUEUE.
#: The user is the asker's NATS user (as in its inbox prefix): the shipped permissions let each agent publish
#: only under its own, so the relay knows who asked. A connection without a user name asks on the bare subject.
ADAPTER_PREFIX = "hookbus.adapter"
ADAPTER_QUEUE = "hookbus-adapters"


def adapter_subject(flavor: str, user: str | None = None) -> str:
    """The subject ``hookbus up`` serves ``user``'s hook inputs of ``flavor`` (``claude-code``, ``codex``) on."""
    if not TOKEN_RE.fullmatch(flavor):
        raise SubjectError(flavor, "an adapter flavor must match [A-Za-z0-9_-]+")
    if user is None:
        return f"{ADAPTER_PREFIX}.{flavor}"
    subject = f"{ADAPTER_PREFIX}.{flavor}.{user}"
    validate_subject(subject)
    return subject


def adapter_asker(subject: str, flavor: str) -> str | None:
    """The user a relay request's subject names (``hookbus.adapter.<flavor>.<user>``), None on the bare one."""
    return subject[len(ADAPTER_PREFIX) + len(flavor) + 2 :] or None
