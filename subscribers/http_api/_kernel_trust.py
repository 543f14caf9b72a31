"""Trust as the kernels see it, for the console: one word per handler and who made it so.

The console's own view knows the trust store (approved by whom, or on first
sight by a ``trust-new`` kernel) but not another process's settings: a
handler managed by ``hookbus demo``'s kernel runs there while every other
kernel, the console's included, waits for its approval. Each process says
its kernel's settings in its presence record (``kernel`` components,
:func:`bus._presence.kernel_components`); this module joins the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from bus._middleware.schema import TrustRecord
from bus._presence import Present

#: The trust store's ``how`` of a handler a trust-new kernel approved on first sight.
FIRST_SIGHT: Final = "trust-new"


@dataclass(frozen=True, slots=True)
class Kernels:
    """The present kernels' own trust settings: who manages which handler, who runs with trust-new."""

    managed: dict[str, list[str]] = field(default_factory=dict)  # qualname -> processes managing it
    trust_new: list[str] = field(default_factory=list)  # processes approving new handlers on first sight

    @classmethod
    def of(cls, present: list[Present]) -> Kernels:
        managed: dict[str, list[str]] = {}
        trust_new: list[str] = []
        for item in present:
            if item.silent:
                continue  # probably gone: its settings no longer run anything
            process = item.record.process
            for part in item.record.components:
                if part.kind != "kernel":
                    continue
                if part.detail == FIRST_SIGHT:
                    trust_new.append(process)
                elif part.detail == "managed":
                    managed.setdefault(part.name, []).append(process)
        return cls({name: sorted(set(who)) for name, who in managed.items()}, sorted(set(trust_new)))

    def managers(self, qualname: str) -> list[str]:
        return self.managed.get(qualname, [])


def shown(state: str, record: TrustRecord | None) -> tuple[str, str | None]:
    """The word the console shows for a runnable handler's trust state, and by whom it is so."""
    if state == "managed":
        return "managed", "this console's kernel (hookbus up's config)"
    if state == "trusted" and record is not None:
        if record.how == FIRST_SIGHT:
            return FIRST_SIGHT, f"approved on first sight by a trust-new kernel ({record.approved_by})"
        return "approved", record.approved_by
    return state, None


def waiting_words(trust: str) -> str:
    """Why a declared handler waits, in words."""
    return "never approved" if trust == "untrusted" else "changed since it was approved"
