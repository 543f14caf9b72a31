"""What the kernel's view reports as its chains change: broken chains, dropped orders, modules come and gone.

Each report is said once per change: a log line and, through ``notify``, an
event (``eva.middleware.broken``, ``eva.module.attached``, ...).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from bus._core.subjects import BROKEN_CLEARED, BROKEN_SET, MODULE_ATTACHED, MODULE_DETACHED
from bus._middleware.kernel.chain import StageChain

log = logging.getLogger("hookbus.middleware")
#: When a view of this process last logged a module's departure (several views share one log, and each
#: sees it at its own moment): said again only after this many seconds.
_GONE_SAID: dict[str, float] = {}
_GONE_SAID_FOR_S: Final = 60.0

#: Called with (subject, payload) for the events the view reports: broken chains, modules attached/detached.
Notify = Callable[[str, dict[str, Any]], None]
#: Called with (stage, why) when a chain's order drops the bag's edges (a cycle among them).
Noted = Callable[[str, str], None]


class Reports:
    """Says what changed between one build of the chains and the next."""

    def __init__(self, notify: Notify | None, on_note: Noted | None) -> None:
        self._notify = notify
        self._on_note = on_note
        self._notes: dict[str, str] = {}
        self._broken: dict[str, str] = {}
        #: The modules live at the last report (set at start: those present then are not reported as attached).
        self.modules: set[str] = set()

    def report(self, chains: dict[str, StageChain], live: set[str]) -> None:
        self._broken_chains(chains)
        self._notes_of(chains)
        self._modules_of(chains, live)

    def _broken_chains(self, chains: dict[str, StageChain]) -> None:
        now_broken = {stage: chain.broken for stage, chain in chains.items() if chain.broken}
        for stage, reason in now_broken.items():
            if self._broken.get(stage) != reason:
                guard = chains[stage].guard
                if guard:
                    log.error("middleware chain of %s broken: %s; calls cancelled (%s)", stage, reason, guard)
                else:
                    log.error("middleware chain of %s disabled: %s; its handlers are not called", stage, reason)
                self._emit(BROKEN_SET, {"stage": stage, "reason": reason})
        for stage in self._broken.keys() - now_broken.keys():
            log.warning("middleware chain of %s works again", stage)
            self._emit(BROKEN_CLEARED, {"stage": stage})
        self._broken = now_broken

    def _notes_of(self, chains: dict[str, StageChain]) -> None:
        """Say once (per change) that a stage's order dropped its bag edges."""
        notes = {stage: chain.note for stage, chain in chains.items() if chain.note}
        for stage, note in notes.items():
            if self._notes.get(stage) != note:
                log.warning("middleware chain of %s: %s", stage, note)
                if self._on_note is not None:
                    self._on_note(stage, note)
        self._notes = notes

    def _modules_of(self, chains: dict[str, StageChain], now: set[str]) -> None:
        """eva.module.attached when a module appears; eva.module.detached when one leaves without a guard."""
        held = {link.decl.module for chain in chains.values() for link in chain.holds}
        for module in sorted(now - self.modules):
            self._emit(MODULE_ATTACHED, {"module": module})
        for module in sorted(self.modules - now):
            if module in held:
                said = _GONE_SAID.get(module)
                clock = time.monotonic()
                if said is not None and clock - said < _GONE_SAID_FOR_S:
                    continue  # another view of this process said it (hookbus up runs several): one line per fact
                _GONE_SAID[module] = clock
                log.error(
                    "module %s is gone: its fail-closed handlers cancel their stages until it is back "
                    "or detached (hookbus detach %s)",
                    module,
                    module,
                )
            else:
                self._emit(MODULE_DETACHED, {"module": module, "reason": "gone"})
        self.modules = now

    def _emit(self, subject: str, payload: dict[str, Any]) -> None:
        if self._notify is not None:
            self._notify(subject, payload)
