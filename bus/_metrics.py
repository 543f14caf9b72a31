"""Registering hookbus's Prometheus collectors: explicit, by whoever serves /metrics.

Importing ``bus`` registers nothing on the global registry; the command line
(``--metrics-port``) and services call :func:`register_collectors`, and an
application embedding a Bus calls it when it exposes its own /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from bus._middleware.kernel.asking import ASKS
from bus._middleware.kernel.metrics import MIDDLEWARE
from bus._runtime.stats import COLLECTOR

_registered: set[tuple[int, int]] = set()  # (registry, collector) pairs, by identity; both live for the process


def register_once(collectors: Iterable[Collector], registry: CollectorRegistry = REGISTRY) -> None:
    """Register each of ``collectors`` on ``registry`` unless it already is (services call this when they start)."""
    for collector in collectors:
        key = (id(registry), id(collector))
        if key not in _registered:
            registry.register(collector)
            _registered.add(key)


def register_collectors(registry: CollectorRegistry = REGISTRY) -> None:
    """Expose the bus counters, the middleware and the asks metrics on ``registry`` (once; again is a no-op)."""
    register_once((COLLECTOR, MIDDLEWARE, ASKS), registry)
