"""Handler records on the shipped permissions: an agent writes drafts only, never approvals or approved copies."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bus import Bus, Cancel, NatsServer
from bus._middleware.kernel.approvals import approve, queue
from bus._middleware.registry import ensure_buckets
from bus._records.record import from_fields
from bus._records.store import RecordStore
from bus.testing import wait_for_chain
from subscribers.records_runner.record_runner import RecordsRunner, RecordsRunnerSettings
from tests.conftest import as_user as url
from tests.conftest import shipped_server
from tests.middleware.test_attacks import Attacker
from tests.support.waiting import wait_until

SOURCE = """
async def handle(stage, payload, ctx):
    return Cancel("by hand") if "rm -rf" in payload["input"]["command"] else Continue()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "records-permissions")


async def test_agent_writes_drafts_the_runner_serves_only_what_the_operator_approved(server: NatsServer) -> None:
    async with Bus(url(server, "bus")) as bus:
        await ensure_buckets(bus.port)
    async with Bus(url(server, "module-records")) as runner_bus, Bus(url(server, "agent-eva")) as agent:
        runner = RecordsRunner(runner_bus, RecordsRunnerSettings(heartbeat=0.5))
        async with runner.running():
            record = from_fields({"name": "no_rm", "stage": "tool.call", "source": SOURCE}, author="agent:eva")
            await RecordStore(agent.port, "records").put(record)
            await wait_until(lambda: "no_rm" in runner.waiting, what="the agent's draft announced as waiting")

            eva = await Attacker().connect(server, "agent-eva")
            bob = await Attacker().connect(server, "agent-bob")
            forged = b'{"record": {}, "identity": "' + b"0" * 64 + b'"}'
            await eva.nc.publish("$KV.hookbus_records_approved.records.no_rm", forged)  # a forged approved copy
            await eva.nc.publish("$KV.hookbus_trust.records.no_rm", b'{"identity": "x"}')  # a self-approval
            await eva.nc.publish("$KV.hookbus_records.guard.no_rm", record.to_bytes())  # another module's records
            await bob.nc.publish("$KV.hookbus_records.records.no_rm", record.to_bytes())  # an agent without the grant
            for attacker in (eva, bob):
                await attacker.settle()
            await wait_until(lambda: len(eva.denied) == 3 and len(bob.denied) == 1, what="every write refused")
            assert runner.served == {}

            async with Bus(url(server, "operator")) as op:
                view = await op.middleware.start()
                await view.wait_until(lambda: any(w.decl.qualname == "records.no_rm" for w in queue(view)), 10)
                await approve(view, "records.no_rm")
            await wait_until(lambda: "no_rm" in runner.served, what="the approved record served")
            await wait_for_chain(agent, "tool.call", ["records.no_rm"])
            decision = await agent.intercept("tool.call", {"name": "shell", "input": {"command": "rm -rf /"}})
            assert isinstance(decision, Cancel) and decision.reason == "by hand"
            for attacker in (eva, bob):
                await attacker.nc.close()
