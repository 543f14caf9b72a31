"""The fleet receiver of `hookbus up` cannot take the shell hooks' connection down with it.

A server with a small ``max_pending`` cuts any connection that falls that far
behind as a slow consumer. `hookbus up` is stopped (SIGSTOP: a process too busy
to read) while a flood only the fleet receiver subscribes to goes out, with
marker events for a shell hook in between. The hook on `hookbus up`'s main
connection must run for every marker, and the receiver's loss must show on
/metrics (never silent).
"""

from __future__ import annotations

import os
import re
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from bus import NatsServer
from bus._core.encoder import Encoder
from tests.cli.test_cli import UpProcess
from tests.support.hooks_support import write_hooks
from tests.support.waiting import wait_until

#: Bytes the server holds for one client before cutting it: far above what the main connection ever waits for.
MAX_PENDING = 3 * 1024 * 1024 // 2  # not under max_payload (1 MiB)
FLOOD_SUBJECT = "eva.flood.load"  # of the services of hookbus up, only the fleet receiver subscribes to it (eva.>)
MARKER_SUBJECT = "eva.custom.marker"
#: Flood events of about 16 KB (some 100 MB: past the kernel's socket buffers and MAX_PENDING), a marker every 250.
FLOOD = 6_000
MARKER_EVERY = 250


@pytest.fixture
def tight_server(tmp_path: Path) -> Iterator[NatsServer]:
    config = tmp_path / "tight.conf"
    config.write_text(f"max_pending: {MAX_PENDING}\n")
    with NatsServer(config_file=config, store_dir=tmp_path / "js") as server:
        yield server


def scrape(url: str) -> dict[str, float]:
    """Unlabelled samples and labelled ones (name{labels}) of a /metrics page."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples: dict[str, float] = {}
    for name, value in re.findall(r"^([a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M):
        samples[name] = float(value)
    return samples


def counted_flood(samples: dict[str, float], subject: str) -> float:
    return sum(v for k, v in samples.items() if k.startswith("hookbus_fleet_events_total{") and f'"{subject}"' in k)


@pytest.mark.parametrize(
    "flood_subject",
    [
        FLOOD_SUBJECT,  # the fleet receiver's alone
        "prx.lifecycle.tool_call",  # the agent metrics' too (on a connection of their own as well)
    ],
)
async def test_a_fleet_receiver_cut_as_slow_consumer_costs_the_shell_hooks_nothing(
    tight_server: NatsServer, workspace: Path, flood_subject: str
) -> None:
    markers = workspace / "markers.log"
    hook = workspace / "marker.sh"
    hook.write_text(f"#!/bin/sh\necho x >> {markers}\n")
    hook.chmod(0o700)
    write_hooks(workspace, {MARKER_SUBJECT: [{"id": "marker", "command": str(hook)}]})
    up = UpProcess(workspace, "--nats-url", tight_server.url)
    encoder = Encoder()
    flood, _ = encoder.encode(flood_subject, {"output": "x" * 16_000}, "s1", 0)
    nc = await nats.connect(tight_server.url)
    sent_markers = sent_flood = 0

    async def marker() -> None:
        nonlocal sent_markers
        data, _ = encoder.encode(MARKER_SUBJECT, {"n": sent_markers}, "s1", 0)
        await nc.publish(MARKER_SUBJECT, data)
        sent_markers += 1

    try:
        for _ in range(3):
            await marker()
        os.kill(up.proc.pid, signal.SIGSTOP)  # too busy to read: the server holds what it sends
        try:
            for i in range(FLOOD):
                await nc.publish(flood_subject, flood)
                sent_flood += 1
                if i % MARKER_EVERY == MARKER_EVERY - 1:
                    await marker()
                    await nc.flush()
            await nc.flush()
        finally:
            os.kill(up.proc.pid, signal.SIGCONT)
        for _ in range(3):  # and afterwards
            await marker()
        await nc.flush()

        def lines() -> int:
            return len(markers.read_text().splitlines()) if markers.exists() else 0

        await wait_until(lambda: lines() >= sent_markers, timeout=60, what=f"{sent_markers} marker hook runs")
        assert lines() == sent_markers  # every marker, once: the main connection lost nothing

        await wait_until(
            lambda: scrape(up.metrics_url).get("hookbus_fleet_receiver_disconnects_total", 0) >= 1,
            what="the fleet receiver's cut to be counted",
        )
        samples = scrape(up.metrics_url)
        fleet_cuts = samples["hookbus_fleet_receiver_disconnects_total"]
        if (
            flood_subject == FLOOD_SUBJECT
        ):  # the process's disconnects are all the receiver's: the main connection was never cut
            assert samples["hookbus_nats_disconnects_total"] == fleet_cuts
        # The receiver's loss is visible as such: it counted fewer flood events than were sent.
        assert counted_flood(samples, flood_subject) < sent_flood
    finally:
        await nc.close()
        up.close()


def test_remembered_labels_are_the_capped_ones_and_bounded() -> None:
    """The per-event label lookup gives what the caps decide, also for pairs past the cap, and stays bounded."""
    from bus._runtime.stats import OTHER
    from subscribers.fleet_metrics._fleet_series import MAX_EVENT_PAIRS, MAX_REMEMBERED_KEYS, FleetMetrics

    fleet = FleetMetrics()
    for n in range(MAX_EVENT_PAIRS):
        pair = (f"eva.custom.e{n % 200}", f"agent-{n // 200}")
        assert fleet.event_key(*pair) == pair
    late = ("eva.custom.e0", "agent-late")
    assert fleet.event_key(*late) == (OTHER, OTHER)
    assert fleet.event_keys[late] == (OTHER, OTHER)  # remembered as capped: the next one is counted the same
    assert fleet.event_keys[("eva.custom.e0", "agent-0")] == ("eva.custom.e0", "agent-0")
    for n in range(2 * MAX_REMEMBERED_KEYS):
        fleet.event_key(f"eva.custom.flood{n}", "a")
    assert len(fleet.event_keys) == MAX_REMEMBERED_KEYS
    assert fleet.event_key("eva.custom.flood-last", "a") == (OTHER, OTHER)
