"""Registering hookbus's Prometheus collectors: explicit, by whoever serves /metrics.

Importing ``bus`` registers nothing on the global registry; the command line
(``--metrics-port``) and services call :func:`register_collectors`, and an
application embedding a Bus calls it when it exposes its own /metrics.
"""

from __future__ import annotations

from prometheus_client.registry import REGISTRY, CollectorRegistry

from bus.core.stats import COLLECTOR
from bus.middleware.kernel.metrics import MIDDLEWARE

_registered: list[CollectorRegistry] = []


def register_collectors(registry: CollectorRegistry = REGISTRY) -> None:
    """Expose the bus counters and the middleware metrics on ``registry`` (once; again is a no-op)."""
    if any(done is registry for done in _registered):
        return
    registry.register(COLLECTOR)
    registry.register(MIDDLEWARE)
    _registered.append(registry)
