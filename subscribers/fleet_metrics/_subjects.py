"""The fleet-metrics receivers' queue groups, and the journal subjects the asks queue counts."""

from __future__ import annotations

from bus._journal.subjects import JOURNAL_PREFIX

#: The queue group of the fleet-metrics receivers (``hookbus up``, ``hookbus metrics``): each message counted once.
FLEET_METRICS_QUEUE = "hookbus-fleet-metrics"
#: The queue group of the asks queue's counters (``hookbus up``): each kernel's ask entry counted once.
ASKS_QUEUE = "hookbus-up-asks"
#: Where kernels journal how each ask ended (with their NATS user, or without one on a server without users).
ASKS_JOURNAL = (f"{JOURNAL_PREFIX}.middleware", f"{JOURNAL_PREFIX}.middleware.*")
