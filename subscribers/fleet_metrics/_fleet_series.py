"""Every fleet series, with the label caps that keep their number bounded (docs/metrics.md, "The fleet")."""

from __future__ import annotations

import re
from typing import Final

from bus._middleware.kernel.metrics import BUCKETS as MIDDLEWARE_BUCKETS
from bus._runtime.stats import DROP_REASONS, OTHER, REFUSE_REASONS, LabelCap
from subscribers.fleet_metrics._series import FleetCollector, FleetCounter, FleetHistogram
from subscribers.shell_hooks._hook_metrics import DURATION_BUCKETS as HOOK_BUCKETS

#: What a label value from a sender may look like (subjects, patterns, names, reasons); else ``invalid``.
_LABEL_RE: Final = re.compile(r"[A-Za-z0-9_.*>:-]{1,200}")
INVALID: Final = "invalid"
#: Distinct (subject, agent) pairs kept before new pairs fold into (other, other).
MAX_EVENT_PAIRS: Final = 1024
#: Received (subject, source) pairs whose labels are remembered (hostile senders cannot grow it further).
MAX_REMEMBERED_KEYS: Final = 4 * MAX_EVENT_PAIRS


class Capped:
    """A label: checked for shape (``invalid``), then capped (``other``)."""

    __slots__ = ("_cap",)

    def __init__(self, limit: int) -> None:
        self._cap = LabelCap(limit)

    def __call__(self, value: object) -> str:
        if isinstance(value, str) and not _LABEL_RE.fullmatch(value):
            return INVALID
        return self._cap(value)


class FleetMetrics:
    """The fleet's series and the caps of their labels; the receiver's feeders fill them."""

    def __init__(self) -> None:
        self.subjects = Capped(256)
        self.reported_subjects = Capped(256)  # from reports: a report cannot use up the events' labels
        self.agents = Capped(64)
        self.reasons = Capped(32)
        self.trigger_reasons = Capped(16)
        self.handlers = Capped(256)
        self.stages = Capped(64)
        self.hooks = Capped(256)
        self.hook_events = Capped(128)
        self.triggers = Capped(128)
        self._pairs: set[tuple[str, str]] = set()
        #: (subject, source) as received -> their labels: the per-event path is one lookup (bounded; a miss is
        #: only slower: a label, once decided, never changes).
        self.event_keys: dict[tuple[str, str | None], tuple[str, str]] = {}

        c, h = FleetCounter, FleetHistogram
        self.events = c(
            "events", "Events seen on the bus, by subject and agent (the envelope's source).", ("subject", "agent")
        )
        self.refused = c(
            "events_refused", "Events the fleet receiver refused (malformed, oversize, depth).", ("reason",)
        )
        self.dropped = c(
            "events_dropped", "Events not published or not delivered, as processes report, by reason.", ("reason",)
        )
        self.truncated = c("events_truncated", "Oversized events cut to fit, as emitters report.")
        self.delivered = c("events_delivered", "Events handed to subscriber handlers, by subject.", ("subject",))
        self.handler_errors = c(
            "handler_errors", "Subscriber handlers that raised, by subscription pattern.", ("subject",)
        )
        self.disconnects = c("nats_disconnects", "Times a hookbus process lost its NATS connection.")
        self.reconnects = c("nats_reconnects", "Times a hookbus process reconnected to NATS.")
        mw = ("handler", "stage")
        self.mw_calls = c("middleware_calls", "Middleware reactions by outcome, as kernels report.", (*mw, "outcome"))
        self.mw_decisions = c("middleware_decisions", "What middleware reactions read as.", (*mw, "decision"))
        self.mw_fail_closed = c("middleware_fail_closed_cancels", "Faults of fail_closed handlers that cancelled.", mw)
        self.mw_duration = h(
            "middleware_duration_seconds", "Middleware latency as kernels saw it.", mw, MIDDLEWARE_BUCKETS
        )
        hook = ("hook", "event")
        self.hook_runs = c("shell_hook_runs", "Shell hook runs (started), from the journal.", hook)
        self.hook_failures = c("shell_hook_failures", "Shell hook runs that failed, from the journal.", hook)
        self.hook_timeouts = c("shell_hook_timeouts", "Shell hook runs stopped at their timeout.", hook)
        self.hook_refusals = c("shell_hook_refusals", "Shell hook runs refused by the security rules.", hook)
        self.hook_duration = h("shell_hook_duration_seconds", "Wall time of shell hook runs.", hook, HOOK_BUCKETS)
        self.fired = c("trigger_fired", "Trigger firings (turns started), from the journal.", ("trigger",))
        self.suppressed = c(
            "trigger_suppressed", "Events that started no turn, by trigger and reason.", ("trigger", "reason")
        )
        self.reports = c(
            "reports", "Counters reports received: accepted, clamped (a value or list cut), refused.", ("outcome",)
        )
        self.entries = c("journal_entries", "Journal entries read: counted, ignored (other kinds), refused.",
                         ("outcome",))  # fmt: skip
        # Known reasons start at 0, so the first drop is a rise Prometheus sees (rate, increase, the alerts).
        for reason in DROP_REASONS:
            self.dropped.add((reason,), 0)
        for reason in REFUSE_REASONS:
            self.refused.add((reason,), 0)
        self.collector = FleetCollector(
            (
                self.events, self.refused, self.dropped, self.truncated, self.delivered, self.handler_errors,
                self.disconnects, self.reconnects, self.mw_calls, self.mw_decisions, self.mw_fail_closed,
                self.mw_duration, self.hook_runs, self.hook_failures, self.hook_timeouts, self.hook_refusals,
                self.hook_duration, self.fired, self.suppressed, self.reports, self.entries,
            )
        )  # fmt: skip

    def event_key(self, subject: str, source: str | None) -> tuple[str, str]:
        """The (subject, agent) labels of an event, capped per label and per pair (remembered in ``event_keys``)."""
        pair = (self.subjects(subject), self.agents(source))
        if pair not in self._pairs:
            if len(self._pairs) >= MAX_EVENT_PAIRS:
                pair = (OTHER, OTHER)
            else:
                self._pairs.add(pair)
        if len(self.event_keys) < MAX_REMEMBERED_KEYS:
            self.event_keys[subject, source] = pair
        return pair
