"""The asks queue on `hookbus up`'s /metrics (bus-wide, from the bucket and the journal), and its alert."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bus import Bus
from bus._middleware.asks.store import AskStore
from tests.cli.test_cli import UpProcess
from tests.conftest import require_binary
from tests.services.test_asks_http import Held
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("asks-metrics"))
    yield process
    process.close()


@pytest.fixture
async def held(up: UpProcess) -> AsyncIterator[Held]:
    async with AsyncExitStack() as stack:
        kernel = await stack.enter_async_context(Bus(up.nats_url, name="asks-metrics-kernel", trust_new=True))
        yield Held(up, kernel, stack)


async def scrape(up: UpProcess) -> dict[tuple[str, str], float]:
    """``hookbus up``'s fleet asks samples: (name, kind label or "") -> value."""
    async with aiohttp.ClientSession() as session, session.get(up.metrics_url) as response:
        text = await response.text()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("hookbus_fleet_asks_"):
                out[sample.name, sample.labels.get("kind", "")] = sample.value
    return out


async def test_the_queue_shows_a_held_ask_its_age_and_how_asks_end(up: UpProcess, held: Held) -> None:
    before = await scrape(up)
    assert before[("hookbus_fleet_asks_pending", "")] == 0
    assert before[("hookbus_fleet_asks_answered_total", "allow")] == 0  # at 0 from the start: a rise is seen
    answered, answered_session = await held.call({"n": 1})
    expiring, _ = await held.call({"n": 2}, timeout=6.0)
    store = AskStore(held.kernel.port)

    async def over_half() -> bool:
        now = await scrape(up)
        return now[("hookbus_fleet_asks_deadline_used_ratio", "")] > 0.5

    await wait_until(over_half, timeout=30, what="an ask past half its deadline")
    now = await scrape(up)
    assert now[("hookbus_fleet_asks_pending", "")] == 2
    assert now[("hookbus_fleet_asks_oldest_age_seconds", "")] > 0
    await expiring
    ask_id = next(item.ask.id for item in await store.pending() if item.ask.session == answered_session)
    await store.answer(ask_id, "allow", "alice")
    await answered

    async def ended() -> bool:
        now = await scrape(up)
        allow = now[("hookbus_fleet_asks_answered_total", "allow")]
        return allow == 1 and now[("hookbus_fleet_asks_expired_total", "")] == 1

    await wait_until(ended, timeout=30, what="the answer and the expiry counted")
    await wait_until(lambda: _pending_is(up, 0), timeout=30, what="the queue empty again")


async def _pending_is(up: UpProcess, count: int) -> bool:
    return (await scrape(up))[("hookbus_fleet_asks_pending", "")] == count


ALERT = "HookbusAskWaitingPastHalfItsDeadline"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"


def test_the_alert_fires_past_half_the_deadline_and_clears(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    rule = next(r for r in rules if r.get("alert") == ALERT)
    fired = {
        "exp_labels": {"severity": "warning"},
        "exp_annotations": {
            "summary": rule["annotations"]["summary"],
            "description": rule["annotations"]["description"].replace("{{ $value | humanizePercentage }}", "60%"),
        },
    }
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'hookbus_fleet_asks_deadline_used_ratio{instance="up"}', "values": "0 0.3 0.5 0.6 0.9 0"}
                ],
                "alert_rule_test": [
                    {"eval_time": "2m", "alertname": ALERT, "exp_alerts": []},  # exactly half: not yet
                    {"eval_time": "3m", "alertname": ALERT, "exp_alerts": [fired]},
                    {"eval_time": "5m", "alertname": ALERT, "exp_alerts": []},  # answered: cleared
                ],
            }
        ],
    }
    path = tmp_path / "asks_alert_test.yml"
    path.write_text(yaml.safe_dump(test))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
