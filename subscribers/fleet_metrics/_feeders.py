"""Events and journal entries into the fleet's series.

Events are counted by subject and agent (the envelope's ``source``) once
they pass the receiver's check (bus._core.envelope.decode_event); what fails it is
counted by reason. Journal entries are checked and clamped by the journal's
own decoder; shell-hook runs and trigger firings and suppressions are counted
from them (middleware reactions come from the kernels' counters reports,
which include the neutral continues the journal skips).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from bus._core.envelope import decode_event
from bus._core.errors import EnvelopeError, JournalError
from bus._core.subjects import is_vouched, split_vouched
from bus._journal.entries import JournalEntry, decode_entry
from bus._transport.port import RawMessage
from subscribers.fleet_metrics._fleet_series import FleetMetrics

#: Shell-hook decisions that mean the hook ran (a refusal never started one).
_RAN: Final = frozenset({"ok", "failed", "timeout"})


def event_counter(fleet: FleetMetrics, max_bytes: int, max_depth: int) -> Callable[[RawMessage], Awaitable[None]]:
    """The callback that counts each event message as it crossed the bus (checked by the envelope decoder).

    Every event of the fleet goes through it: the lookups are hoisted out, the
    labels of a known (subject, source) are one dict lookup, the count one update.
    """
    refused = fleet.refused
    counts = fleet.events.values
    keys = fleet.event_keys
    new_key = fleet.event_key

    async def count_event(msg: RawMessage) -> None:
        subject = msg.subject
        if is_vouched(subject):  # counted under the event's own subject
            vouched = split_vouched(subject)
            if vouched is None:
                refused.add(("malformed",))
                return
            subject = vouched[1]
        try:
            source = decode_event(subject, msg.data, max_bytes, max_depth).source
        except EnvelopeError as exc:
            refused.add((exc.drop,))
            return
        pair = keys.get((subject, source)) or new_key(subject, source)
        counts[pair] = counts.get(pair, 0) + 1

    return count_event


def count_entry(fleet: FleetMetrics, subject: str, data: bytes) -> None:
    """Count one journal entry (refused if it is not a valid entry of its subject's kind)."""
    try:
        entry = decode_entry(data, subject)
    except JournalError:
        fleet.entries.add(("refused",))
        return
    if entry.kind == "shell_hook":
        _hook_run(fleet, entry)
    elif entry.kind == "trigger":
        _trigger(fleet, entry)
    else:
        fleet.entries.add(("ignored",))
        return
    fleet.entries.add(("counted",))


def _hook_run(fleet: FleetMetrics, entry: JournalEntry) -> None:
    key = (fleet.hooks(entry.who), fleet.hook_events(entry.point))
    decision = entry.decision
    if decision == "refused":
        fleet.hook_refusals.add(key)
        return
    if decision not in _RAN:
        return
    fleet.hook_runs.add(key)
    if decision == "failed":
        fleet.hook_failures.add(key)
    elif decision == "timeout":
        fleet.hook_timeouts.add(key)
    if entry.duration_ms is not None:
        fleet.hook_duration.observe(key, entry.duration_ms / 1000)


def _trigger(fleet: FleetMetrics, entry: JournalEntry) -> None:
    trigger = fleet.triggers(entry.who)
    if entry.decision == "fired":
        fleet.fired.add((trigger,))
    elif entry.decision == "suppressed":
        reason = (entry.cause or "").partition(":")[0].strip()
        fleet.suppressed.add((trigger, fleet.trigger_reasons(reason)))
