"""The fleet receiver of `hookbus up` cannot take the shell hooks' connection down with it.

A server with a small ``max_pending`` cuts any connection that falls that far
behind as a slow consumer. A flood only the fleet receiver subscribes to makes
it fall behind; marker events for a shell hook go out in between. The hook on
`hookbus up`'s main connection must run for every marker, and the receiver's
loss must show on /metrics (never silent).
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from bus import NatsServer
from bus.core.envelope import Encoder

from .hooks_support import write_hooks
from .test_cli import UpProcess
from .waiting import wait_until

#: Bytes the server holds for one client before cutting it: far above what the main connection ever waits for.
MAX_PENDING = 3 * 1024 * 1024 // 2  # not under max_payload (1 MiB)
FLOOD_SUBJECT = "eva.flood.load"  # only the fleet receiver subscribes to it (eva.>)
MARKER_SUBJECT = "eva.custom.marker"
#: Flood events per batch, and a marker after every MARKER_EVERY of them.
BATCH = 20_000
MARKER_EVERY = 2_000
#: Batches sent at most while waiting for the receiver to be cut.
MAX_BATCHES = 10


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


def counted_flood(samples: dict[str, float]) -> float:
    return sum(v for k, v in samples.items() if k.startswith("hookbus_fleet_events_total{") and FLOOD_SUBJECT in k)


async def test_a_fleet_receiver_cut_as_slow_consumer_costs_the_shell_hooks_nothing(
    tight_server: NatsServer, workspace: Path
) -> None:
    markers = workspace / "markers.log"
    hook = workspace / "marker.sh"
    hook.write_text(f"#!/bin/sh\necho x >> {markers}\n")
    hook.chmod(0o700)
    write_hooks(workspace, {MARKER_SUBJECT: [{"id": "marker", "command": str(hook)}]})
    up = UpProcess(workspace, "--nats-url", tight_server.url)
    encoder = Encoder()
    flood, _ = encoder.encode(FLOOD_SUBJECT, {"output": "x" * 2000}, "s1", 0)
    nc = await nats.connect(tight_server.url)
    sent_markers = sent_flood = 0

    async def marker() -> None:
        nonlocal sent_markers
        data, _ = encoder.encode(MARKER_SUBJECT, {"n": sent_markers}, "s1", 0)
        await nc.publish(MARKER_SUBJECT, data)
        sent_markers += 1

    try:
        cut = 0.0
        for _ in range(MAX_BATCHES):
            for i in range(BATCH):
                await nc.publish(FLOOD_SUBJECT, flood)
                if i % MARKER_EVERY == MARKER_EVERY - 1:
                    await marker()
            await nc.flush()
            sent_flood += BATCH
            cut = scrape(up.metrics_url).get("hookbus_fleet_receiver_disconnects_total", 0.0)
            if cut:
                break
        assert cut >= 1, f"the fleet receiver kept up with {sent_flood} events: nothing to show"
        for _ in range(5):  # and afterwards
            await marker()
        await nc.flush()

        def lines() -> int:
            return len(markers.read_text().splitlines()) if markers.exists() else 0

        await wait_until(lambda: lines() >= sent_markers, timeout=60, what=f"{sent_markers} marker hook runs")
        assert lines() == sent_markers  # every marker, once: the main connection lost nothing

        samples = scrape(up.metrics_url)
        # The process's disconnects are all the receiver's: the main connection was never cut.
        assert samples["hookbus_nats_disconnects_total"] == samples["hookbus_fleet_receiver_disconnects_total"]
        # The receiver's loss is visible as such: it counted fewer flood events than were sent.
        assert counted_flood(samples) < sent_flood
    finally:
        await nc.close()
        up.close()
