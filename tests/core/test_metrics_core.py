"""Bus counters reach Prometheus: emits, deliveries, drops by reason, handler errors."""

from __future__ import annotations

import subprocess
import sys

from prometheus_client import REGISTRY, generate_latest

from bus import Bus, Event, register_collectors
from bus._transport.nats_connection import NatsConnection
from bus._transport.publisher import fast_path_available
from bus.testing import EventRecorder
from tests.support.waiting import barrier, wait_until

register_collectors()  # explicit: importing bus registers nothing


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def test_counters_are_exported(nats_url: str) -> None:
    async with Bus(nats_url) as bus:
        rec = EventRecorder()

        def fails(event: Event) -> None:
            raise RuntimeError("x")

        await bus.subscribe("eva.custom.metric", rec)
        await bus.subscribe("eva.custom.metric", fails)
        await bus.flush()
        emitted = sample("hookbus_events_emitted_total", {"subject": "eva.custom.metric"})
        delivered = sample("hookbus_events_delivered_total", {"subject": "eva.custom.metric"})
        malformed = sample("hookbus_events_dropped_total", {"reason": "malformed"})
        errors = sample("hookbus_handler_errors_total", {"subject": "eva.custom.metric"})
        for _ in range(3):
            await bus.emit("eva.custom.metric", {})
        await bus.port.publish_raw("eva.custom.metric", b"junk")
        # A barrier event behind the junk, counted like the three (an emit, two deliveries, one error).
        # Once the recorder has it and the failing handler has raised on it, both subscriptions are done.
        await barrier(bus, "eva.custom.metric", rec)
        await wait_until(
            lambda: sample("hookbus_handler_errors_total", {"subject": "eva.custom.metric"}) >= errors + 4,
            10,
            "the failing handler to see the barrier",
        )
        assert sample("hookbus_events_emitted_total", {"subject": "eva.custom.metric"}) == emitted + 4
        assert sample("hookbus_events_delivered_total", {"subject": "eva.custom.metric"}) == delivered + 8
        assert sample("hookbus_events_dropped_total", {"reason": "malformed"}) == malformed + 2
        assert sample("hookbus_handler_errors_total", {"subject": "eva.custom.metric"}) == errors + 4
    # closing a bus keeps its counts: counters never go down
    assert sample("hookbus_events_emitted_total", {"subject": "eva.custom.metric"}) == emitted + 4
    assert b"hookbus_nats_reconnects_total" in generate_latest(REGISTRY)


async def test_label_cardinality_is_capped(nats_url: str) -> None:
    async with Bus(nats_url) as bus:
        for i in range(300):
            await bus.emit(f"eva.custom.n{i}", {})
        assert len(bus.stats.emitted) == 257  # 256 distinct subjects + "other"
        assert bus.stats.emitted["other"] == 44


async def test_fast_publish_path_is_in_use(bus: Bus) -> None:
    # If a nats-py upgrade removes the internals the fast path uses, this fails
    # (emit still works through the fallback, but slower).
    assert fast_path_available(bus.port.nc)
    assert isinstance(bus.port.conn, NatsConnection) and bus.port.conn.fast


def test_importing_bus_registers_no_collector_until_asked() -> None:
    """A fresh process: ``import bus`` leaves the global registry alone; register_collectors adds both, once."""
    code = (
        "import bus\n"
        "from prometheus_client import REGISTRY, generate_latest\n"
        "before = generate_latest(REGISTRY)\n"
        "bus.register_collectors(); bus.register_collectors()\n"
        "after = generate_latest(REGISTRY)\n"
        "print(b'hookbus_' in before, b'hookbus_events_emitted' in after, b'hookbus_middleware_calls' in after)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


def test_importing_the_services_registers_nothing_until_they_start() -> None:
    """Workers' metrics appear on the global registry when their service starts, not when imported."""
    code = (
        "import subscribers.shell_hooks.shell_worker, subscribers.journal.sink, subscribers.agent_metrics\n"
        "import triggers.engine.engine, bus._cli\n"
        "from prometheus_client import REGISTRY, generate_latest\n"
        "print(b'hookbus_' in generate_latest(REGISTRY))\n"
        "from subscribers.shell_hooks import _hook_metrics as metrics\n"
        "metrics.register_metrics(); metrics.register_metrics()\n"
        "print(b'hookbus_shell_hook_runs' in generate_latest(REGISTRY))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
