"""Internal subjects stay internal: wildcard subscribers, shell hooks and ``hookbus tail`` see events only.

Real plumbing runs meanwhile (a module answering intercepts over reply
inboxes, registry KV, JetStream API calls, journal entries, turn requests);
then one marker event goes out, and it must be the only thing received, with
no drop counted.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NoKeysError

from bus import Bus, Continue, Module, Stage
from bus._journal.entries import JournalEntry, publish_entry
from bus._middleware.registry import MODULES_BUCKET
from bus._turns.server import TurnRequest
from bus.testing import EventRecorder, serving, wait_for_chain
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker
from tests.conftest import hookbus_cmd, unique
from tests.support.hooks_support import script, wait_for_file, write_hooks
from tests.support.waiting import wait_until


@pytest.fixture
async def module(kernel: Bus, nats_url: str) -> AsyncIterator[str]:
    """A module serving tool.call, in the kernel's chain before the test subscribes to anything.

    At teardown it waits until the kernel no longer lists the module: a stop whose registry delete
    did not get through in time (a loaded machine) leaves the module to age out, and the next test's
    kernel would otherwise see it leave mid-test and announce eva.module.detached there.
    """
    served = Module(unique("plumb"))

    @served.stage(Stage.TOOL_CALL)
    async def allow(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    async with serving(served, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{served.name}.allow"])
        yield served.name
    view = await kernel.middleware.start()
    await wait_until(
        lambda: all(ann.module != served.name for ann, _ in view.instances.values()),
        timeout=30,
        what=f"the kernel to see module {served.name} gone",
    )


async def plumbing(kernel: Bus) -> None:
    """Make every kind of internal traffic hookbus and NATS produce, each one at least once."""
    for _ in range(3):  # requests to hookbus.mw.<module>, replies on the kernel's inbox
        assert await kernel.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": "ls"}}) == Continue()
    entry = JournalEntry(kind="subscriber", point="eva.custom.x", phase="handle", who="test", decision="failed")
    assert await publish_entry(kernel.port, entry)
    await kernel.request_turn(TurnRequest(agent=unique("agent"), prompt="hello"))
    await kernel.port.nc.jetstream().account_info()  # $JS.API
    kv = await kernel.port.nc.jetstream().key_value(MODULES_BUCKET)  # $KV
    with contextlib.suppress(NoKeysError):  # the watch is the traffic wanted; nats-py's listing can race it
        await kv.keys()
    await kernel.flush()


@pytest.fixture
async def listener(nats_url: str) -> AsyncIterator[Bus]:
    async with Bus(nats_url, name="listener") as bus:
        yield bus


@pytest.mark.parametrize("pattern", [">", "*", "*.>", "*.*", "*.*.*"])
async def test_wildcard_subscribers_get_only_events_and_count_no_drops(
    kernel: Bus, module: str, listener: Bus, pattern: str
) -> None:
    recorder = EventRecorder()
    await listener.subscribe(pattern, recorder)
    await plumbing(kernel)
    subject = "eva.custom.marker" if pattern in (">", "*", "*.>", "*.*.*") else "eva.marker"
    await kernel.emit(subject, {"marker": True})
    await recorder.wait_for(1)
    await listener.flush()
    assert [event.subject for event in recorder.events] == [subject]
    assert sum(listener.stats.dropped.values()) == 0, dict(listener.stats.dropped)


async def test_a_pattern_that_names_an_internal_prefix_gets_it(kernel: Bus, listener: Bus) -> None:
    named, everything = EventRecorder(), EventRecorder()
    await listener.subscribe("hookbus.>", named)
    await listener.subscribe(">", everything)
    await kernel.emit("hookbus.test.marker", {"n": 1})
    await kernel.emit("eva.custom.after", {"n": 2})
    await everything.wait_for(1)
    await named.wait_for(1)
    assert [event.subject for event in named.events] == ["hookbus.test.marker"]
    assert [event.subject for event in everything.events] == ["eva.custom.after"]


async def test_a_star_shell_hook_runs_for_events_only(kernel: Bus, module: str, nats_url: str, workspace: Path) -> None:
    seen = workspace / "seen"
    script(workspace, "log.sh", f'echo "$ZERO_HOOK_EVENT" >> "{seen}"\n')
    write_hooks(workspace, {"*": [{"command": "./log.sh"}]})
    async with Bus(nats_url, name="worker") as worker_bus:
        worker = await ShellWorker(worker_bus, workspace, WorkerSettings(queue=None, poll_interval_s=0.05)).start()
        try:
            await plumbing(kernel)
            await kernel.emit("eva.custom.marker", {})
            await wait_for_file(seen)
            await wait_until(lambda: worker.stats.runs == 1, what="the marker's hook run")
            assert seen.read_text() == "custom.marker\n"
            assert worker.stats.received == 1
            assert sum(worker_bus.stats.dropped.values()) == 0, dict(worker_bus.stats.dropped)
        finally:
            await worker.stop()


async def test_hookbus_tail_prints_only_events(kernel: Bus, module: str, nats_url: str) -> None:
    tail = subprocess.Popen(
        [*hookbus_cmd(), "tail", "--count", "2", "--nats-url", nats_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tail.stderr is not None
        ready = tail.stderr.readline()
        assert ready.startswith("tailing >"), ready
        await plumbing(kernel)
        await kernel.emit("eva.custom.marker", {"marker": 1})
        await kernel.emit("eva.custom.marker", {"marker": 2})
        await kernel.flush()
        out, err = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate()
    lines = out.splitlines()
    # Two events, none of them plumbing (a module of an earlier test may be reported gone meanwhile: an event too).
    assert len(lines) == 2 and " eva.custom.marker depth=0 " in lines[-1], lines
    assert all(" eva." in line for line in lines), lines
    assert "skipped" not in err, err  # nothing internal was even judged as an event
