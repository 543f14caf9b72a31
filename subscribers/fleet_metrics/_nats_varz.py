"""The embedded nats-server's own figures on ``hookbus up``'s /metrics, named as prometheus-nats-exporter names them.

The NATS dashboard reads ``gnatsd_varz_*``. With only ``hookbus up`` scraped
(the README's set-up) nothing else exports them, so ``hookbus up`` reads its
embedded server's monitoring endpoint (``/varz``, on the loopback address
only) at each scrape and exports the same names, labelled ``server_id``. A
cluster of its own servers is still best watched by the exporter
(docs/deploy.md).
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterable
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("hookbus.fleet")

#: ``/varz`` field -> what it is; exported as ``gnatsd_varz_<field>`` (the exporter's names: gauges, all).
FIELDS: Final = {
    "in_msgs": "Messages received by the server.",
    "out_msgs": "Messages sent by the server.",
    "in_bytes": "Bytes received by the server.",
    "out_bytes": "Bytes sent by the server.",
    "connections": "Client connections open now.",
    "slow_consumers": "Clients the server cut or held as slow consumers.",
    "routes": "Cluster routes open now.",
    "mem": "The server's resident memory, in bytes.",
}
#: A scrape waits this long for the local endpoint (it answers in milliseconds).
TIMEOUT_S: Final = 2.0


class VarzCollector(Collector):
    """``gnatsd_varz_*`` from ``http://<host>:<port>/varz`` at each scrape (nothing when it does not answer)."""

    def __init__(self, host: str, port: int) -> None:
        self.url = f"http://{host}:{port}/varz"

    def read(self) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(self.url, timeout=TIMEOUT_S) as response:  # noqa: S310 - our own http URL
                data = json.loads(response.read())
        except (OSError, ValueError) as exc:
            log.debug("embedded server's /varz unread: %s", exc)
            return None
        return data if isinstance(data, dict) else None

    def collect(self) -> Iterable[GaugeMetricFamily]:
        varz = self.read()
        if varz is None:
            return
        server_id = str(varz.get("server_id") or "embedded")
        for field, doc in FIELDS.items():
            value = varz.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                family = GaugeMetricFamily(f"gnatsd_varz_{field}", doc, labels=["server_id"])
                family.add_metric([server_id], float(value))
                yield family
