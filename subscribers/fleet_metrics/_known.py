"""The fleet's series at zero for the label sets known before anything happens.

A counter that first appears at its full value has no earlier sample, so
``rate()`` and ``increase()`` read nothing for it: on a fresh bus the first
events would never show as rates. What ``hookbus up`` knows at start (and
learns while it runs) gets its series at 0 at once: each hook of hooks.json
on a plain subject, each trigger of triggers.yaml, each declared middleware
handler. Adding 0 to a known series changes nothing, so refreshing is safe.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from bus._core.errors import HookbusError
from bus._middleware.kernel.view import View
from subscribers.fleet_metrics._fleet_series import FleetMetrics
from subscribers.fleet_metrics._series import FleetHistogram

log = logging.getLogger("hookbus.fleet")

#: The decisions a handler's reactions read as (the fleet's ``decision`` label).
DECISIONS: Final = ("continue", "cancel", "patch")
#: The outcome every answering handler's reactions have (the fleet's ``outcome`` label).
ANSWERED: Final = "ok"


def _zero(histogram: FleetHistogram, key: tuple[str, ...]) -> None:
    histogram.add_buckets(key, [0] * (len(histogram.bounds) + 1), 0.0)


def hooks(fleet: FleetMetrics, known: Iterable[tuple[str, str]]) -> None:
    """(hook id, subject) of each hook on a plain subject (a pattern's subjects are not known in advance)."""
    for hook_id, subject in known:
        if "*" in subject or ">" in subject:
            continue
        key = (fleet.hooks(hook_id), fleet.hook_events(subject))
        for counter in (fleet.hook_runs, fleet.hook_failures, fleet.hook_timeouts, fleet.hook_refusals):
            counter.add(key, 0)
        _zero(fleet.hook_duration, key)


def triggers(fleet: FleetMetrics, names: Iterable[str]) -> None:
    for name in names:
        fleet.fired.add((fleet.triggers(name),), 0)


def handlers(fleet: FleetMetrics, declared: Iterable[tuple[str, str]]) -> None:
    """(``module.handler``, stage) of each declared handler."""
    for qualname, stage in declared:
        pair = (fleet.handlers(qualname), fleet.stages(stage))
        fleet.mw_calls.add((*pair, ANSWERED), 0)
        for decision in DECISIONS:
            fleet.mw_decisions.add((*pair, decision), 0)
        fleet.mw_fail_closed.add(pair, 0)
        _zero(fleet.mw_duration, pair)


def from_workspace(fleet: FleetMetrics, workspace: Path) -> None:
    """The hooks of ``hooks.json`` and the triggers of ``triggers.yaml`` (a file that does not load: skipped)."""
    from subscribers.shell_hooks import _hooks_file as hooks_file  # loaded with the service, as the workers are
    from triggers.engine import _config as config

    path = workspace / "hooks.json"
    try:
        if path.exists():
            hooks(fleet, ((entry.id, entry.pattern) for entry in hooks_file.load(path).entries))
    except (HookbusError, OSError, ValueError) as exc:
        log.debug("hooks of %s not known at start: %s", path, exc)
    path = workspace / "triggers.yaml"
    try:
        if path.exists():
            triggers(fleet, config.load(path))
    except (HookbusError, OSError, ValueError) as exc:
        log.debug("triggers of %s not known at start: %s", path, exc)


def from_view(fleet: FleetMetrics, view: View) -> None:
    """Every handler the registry declares now."""
    handlers(fleet, ((qualname, decl.stage) for qualname, (decl, _) in view.declarations().items()))
