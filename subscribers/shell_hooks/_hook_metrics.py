"""Prometheus metrics of shell hooks, per (hook, event) as agent_os does per (hook, point).

Label values are hook ids and event keys from hooks.json, so their number is
bounded by the configuration, not by traffic.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.registry import REGISTRY, CollectorRegistry

from bus._metrics import register_once
from bus._runtime.stats import PREFIX
from bus._sandbox.outcome import HookOutcome
from subscribers.shell_hooks._shell import HookResult

_NS: Final = f"{PREFIX}_shell"
_LABELS: Final = ("hook", "event")
#: Hook durations run from milliseconds (a logger) to the 30 s default timeout.
DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

RUNS: Final = Counter(f"{_NS}_hook_runs", "Hook processes started.", _LABELS, registry=None)
FAILURES: Final = Counter(
    f"{_NS}_hook_failures", "Hook runs that failed (non-zero exit, signal, or could not start).", _LABELS, registry=None
)
TIMEOUTS: Final = Counter(f"{_NS}_hook_timeouts", "Hook runs stopped at their timeout.", _LABELS, registry=None)
REFUSALS: Final = Counter(
    f"{_NS}_hook_refusals", "Hook runs refused by the security rules (never started).", _LABELS, registry=None
)
DURATION: Final = Histogram(
    f"{_NS}_hook_duration_seconds", "Wall time of hook runs.", _LABELS, buckets=DURATION_BUCKETS, registry=None
)
SHED: Final = Counter(f"{_NS}_events_shed", "Events dropped because the worker's queue was full.", registry=None)
RUNNING: Final = Gauge(f"{_NS}_hooks_running", "Hook processes running now.", registry=None)
QUEUED: Final = Gauge(f"{_NS}_events_queued", "Events waiting for a free hook slot.", registry=None)
CONFIG_ERRORS: Final = Counter(
    f"{_NS}_config_errors", "hooks.json loads rejected (the last good configuration kept).", registry=None
)


def register_metrics(registry: CollectorRegistry = REGISTRY) -> None:
    """Expose these metrics on ``registry``; the service calls it when it starts (importing registers nothing)."""
    register_once(
        (
            RUNS,
            FAILURES,
            TIMEOUTS,
            REFUSALS,
            DURATION,
            SHED,
            RUNNING,
            QUEUED,
            CONFIG_ERRORS,
        ),
        registry,
    )


@dataclass
class HookPointStats:
    """Per (hook, point) figures, as agent_os serves them at /v1/hooks/metrics."""

    hook: str
    point: str
    calls: int = 0
    failures: int = 0
    timeouts: int = 0
    refusals: int = 0
    total_ms: float = 0.0
    last_error: str | None = None

    def as_json(self) -> dict[str, Any]:
        mean = self.total_ms / self.calls if self.calls else 0.0
        return {**asdict(self), "total_ms": round(self.total_ms, 3), "mean_ms": round(mean, 3)}


#: The snapshot behind GET /api/hooks/metrics; bounded like the labels (by hooks.json).
SNAPSHOT: Final[dict[tuple[str, str], HookPointStats]] = {}


def snapshot() -> list[dict[str, Any]]:
    """Every (hook, point) seen by this process, sorted."""
    return [stats.as_json() for _, stats in sorted(SNAPSHOT.items())]


def _remember(result: HookResult) -> None:
    key = (result.hook_id, result.event)
    stats = SNAPSHOT.get(key)
    if stats is None:
        stats = SNAPSHOT[key] = HookPointStats(*key)
    if result.outcome is HookOutcome.REFUSED:
        stats.refusals += 1
    else:
        stats.calls += 1
        stats.total_ms += result.duration * 1000
        stats.timeouts += result.outcome is HookOutcome.TIMEOUT
        stats.failures += result.outcome is HookOutcome.FAILED
    if result.outcome is not HookOutcome.OK:
        stats.last_error = result.reason


def count_result(result: HookResult) -> None:
    """Count one hook run."""
    _remember(result)
    labels = (result.hook_id, result.event)
    if result.outcome is HookOutcome.REFUSED:
        REFUSALS.labels(*labels).inc()
        return
    if result.exit_code is not None:
        RUNS.labels(*labels).inc()
        DURATION.labels(*labels).observe(result.duration)
    if result.outcome is HookOutcome.TIMEOUT:
        TIMEOUTS.labels(*labels).inc()
    elif result.outcome is HookOutcome.FAILED:
        FAILURES.labels(*labels).inc()
