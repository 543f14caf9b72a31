"""The fleet-metrics receivers' queue group."""

from __future__ import annotations

#: The queue group of the fleet-metrics receivers (``hookbus up``, ``hookbus metrics``): each message counted once.
FLEET_METRICS_QUEUE = "hookbus-fleet-metrics"
