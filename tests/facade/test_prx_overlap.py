"""Overlapping keys in a shared queue group: an event matching several keys runs every key's actions
exactly once across the workers sharing the load (shell hooks, Python subscribers, triggers).

NATS hands a message to one member of a queue group whatever pattern each member subscribed with, so
keys that shared one group split an event between them. Each key now has a group of its own.

How "exactly" is proven: every worker (or member) runs each key one event at a time, in arrival order,
and the publisher sends marker events after the counted ones until every worker has run a marker for
every key. NATS keeps one connection's messages in order to each subscription, so by then every
counted event routed anywhere has run; only then are the counts compared, so extras would show.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Event, TurnRequest
from bus._core.errors import SubjectError
from bus._core.subjects import key_queue
from subscribers import Subscriber
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker
from tests.support.hooks_support import script, wait_until, write_hooks
from tests.support.waiting import probe_until
from triggers.engine import _config as config
from triggers.engine.engine import TriggerEngine

GROUP = "overlap-test"
WORKERS = 3
#: The counted events: 20 on the exact key's subject, 10 on another subject of the prefix.
EVENTS = [("eva.custom.both", n) for n in range(20)] + [("eva.custom.other", n) for n in range(20, 30)]
#: Keys as hooks.json spells them, and the events each must run for exactly once.
KEYS = {
    "*": [n for _, n in EVENTS],
    "eva.custom.*": [n for _, n in EVENTS],
    "eva.custom.both": [n for subject, n in EVENTS if subject == "eva.custom.both"],
}
MARKER_SUBJECT = "eva.custom.both"  # matches every key


def test_each_key_has_its_own_group_within_the_namespace() -> None:
    names = {key: key_queue(GROUP, key) for key in (">", "eva.custom.*", "eva.custom.both")}
    assert len(set(names.values())) == 3
    assert all(name.startswith(f"{GROUP}-") and len(name) == len(GROUP) + 17 for name in names.values())
    assert key_queue(GROUP, ">") == names[">"]  # every worker derives the same name
    assert key_queue("other", ">") != names[">"]  # --queue still namespaces it
    with pytest.raises(SubjectError, match="queue group"):
        key_queue("bad group", ">")


def test_a_subscriber_gives_each_handler_its_own_group() -> None:
    app = Subscriber("groups", queue=GROUP)

    async def first(event: Event, bus: Bus) -> None: ...

    async def second(event: Event, bus: Bus) -> None: ...

    app.on("eva.custom.*")(first)
    app.on("eva.custom.both")(first)
    app.on("eva.custom.both")(second)
    app.on("eva.custom.both")(second)  # the same handler twice: still two routes, each run once
    queues = app.queues()
    assert len(set(queues)) == 4
    assert all(queue is not None and queue.startswith(f"{GROUP}-") for queue in queues)
    alone = Subscriber("alone")  # no queue: every member gets every event, as before
    alone.on("eva.custom.*")(first)
    assert alone.queues() == [None]


def lines_of(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(key, worker, payload) of each line the hooks wrote."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        key, worker, envelope = line.split(" ", 2)
        out.append((key, worker, orjson.loads(envelope)["payload"]))
    return out


def write_workspace(folder: Path, worker: int, out: Path, keys: list[str]) -> None:
    """A workspace whose hooks log the key, the worker and the event's envelope to ``out``."""
    folder.mkdir(exist_ok=True)
    script(folder, "log.sh", 'printf "%s %s %s\\n" "$KEY" "$WORKER" "$ZERO_HOOK_PAYLOAD" >> "$OUT"\n')
    action = {"command": "./log.sh"}
    write_hooks(
        folder, {key: [{**action, "env": {"KEY": key, "WORKER": str(worker), "OUT": str(out)}}] for key in keys}
    )


@contextlib.asynccontextmanager
async def shell_workers(nats_url: str, tmp_path: Path, out: Path) -> AsyncIterator[list[ShellWorker]]:
    """WORKERS shell-hook workers, each on its own connection and workspace, sharing GROUP; one process
    per key at a time, so each key runs its events in arrival order."""
    settings = WorkerSettings(queue=GROUP, max_procs=1, poll_interval_s=0.05)
    async with contextlib.AsyncExitStack() as stack:
        workers = []
        for index in range(WORKERS):
            bus = await stack.enter_async_context(Bus(nats_url, name=f"overlap-{index}"))
            write_workspace(tmp_path / f"ws{index}", index, out, list(KEYS))
            worker = ShellWorker(bus, tmp_path / f"ws{index}", settings)
            await stack.enter_async_context(worker)
            workers.append(worker)
        yield workers


async def settle_with_markers(
    publisher: Bus, seen: Callable[[], set[tuple[str, str]]], expected: set[tuple[str, str]]
) -> None:
    """Publish markers until every (key, worker) pair in ``expected`` has run one."""
    await publisher.flush()
    count = iter(range(10_000))
    await probe_until(
        lambda: publisher.emit(MARKER_SUBJECT, {"marker": next(count)}),
        lambda: expected <= seen(),
        timeout=60,
        what="a marker at every worker for every key",
    )


def counted(records: list[tuple[str, str, dict[str, Any]]]) -> dict[str, list[int]]:
    """The counted events each key ran (markers left out), sorted: duplicates would show twice."""
    runs: dict[str, list[int]] = {}
    for key, _, payload in records:
        if "n" in payload:
            runs.setdefault(key, []).append(payload["n"])
    return {key: sorted(ns) for key, ns in runs.items()}


async def test_overlapping_shell_hook_keys_each_run_once_across_workers(
    nats_url: str, bus: Bus, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    async with shell_workers(nats_url, tmp_path, out) as workers:
        for subject, n in EVENTS:
            await bus.emit(subject, {"n": n})

        def marked() -> set[tuple[str, str]]:
            return {(key, worker) for key, worker, payload in lines_of(out) if "marker" in payload}

        await settle_with_markers(bus, marked, {(key, str(index)) for key in KEYS for index in range(WORKERS)})
        assert counted(lines_of(out)) == KEYS
        by_worker = Counter(worker for _, worker, payload in lines_of(out) if "n" in payload)
        assert len(by_worker) == WORKERS, f"every worker took a share: {by_worker}"
        assert sum(worker.stats.failures for worker in workers) == 0


async def test_reload_adds_and_removes_each_keys_own_subscription(nats_url: str, bus: Bus, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    keys = ["prx.lifecycle.*", "tool_call"]  # a prefix pattern and a bare PRX event name
    async with shell_workers(nats_url, tmp_path, out) as workers:
        for index in range(WORKERS):
            write_workspace(tmp_path / f"ws{index}", index, out, keys)
        wanted = ["prx.lifecycle.*", "prx.lifecycle.tool_call"]
        await wait_until(lambda: all(worker.patterns == wanted for worker in workers), what="the new keys only")
        for n in range(12):
            await bus.emit("prx.lifecycle.tool_call" if n % 2 else "prx.lifecycle.agent_end", {"n": n})
        await bus.flush()
        count = iter(range(10_000))

        def marked() -> set[tuple[str, str]]:
            return {(key, worker) for key, worker, payload in lines_of(out) if "marker" in payload}

        await probe_until(
            lambda: bus.emit("prx.lifecycle.tool_call", {"marker": next(count)}),
            lambda: {(key, str(index)) for key in keys for index in range(WORKERS)} <= marked(),
            timeout=60,
            what="a marker at every worker for every key",
        )
        assert counted(lines_of(out)) == {"prx.lifecycle.*": list(range(12)), "tool_call": [1, 3, 5, 7, 9, 11]}


async def test_overlapping_python_handlers_each_run_once_across_members(nats_url: str, bus: Bus) -> None:
    records: list[tuple[str, str, dict[str, Any]]] = []

    def member(index: int) -> Subscriber:
        app = Subscriber(f"overlap-{index}", queue=GROUP)

        def record(name: str) -> Callable[[Event, Bus], Any]:
            async def handle(event: Event, out: Bus) -> None:
                records.append((name, str(index), event.payload))  # before any await: in arrival order

            handle.__qualname__ = f"overlap.{name}"  # the same handler in every member
            return handle

        app.on("*")(record("*"))
        app.on("eva.custom.*")(record("eva.custom.*"))
        app.on("eva.custom.both")(record("eva.custom.both"))
        app.on("eva.custom.both")(record("eva.custom.both again"))  # the same pattern, another handler
        return app

    expected = {**KEYS, "eva.custom.both again": KEYS["eva.custom.both"]}
    async with contextlib.AsyncExitStack() as stack:
        apps = []
        for index in range(WORKERS):
            member_bus = await stack.enter_async_context(Bus(nats_url, name=f"member-{index}"))
            app = member(index)
            await app.start(member_bus)
            stack.push_async_callback(app.stop)
            apps.append(app)
        for subject, n in EVENTS:
            await bus.emit(subject, {"n": n})

        def marked() -> set[tuple[str, str]]:
            return {(name, who) for name, who, payload in records if "marker" in payload}

        await settle_with_markers(bus, marked, {(name, str(index)) for name in expected for index in range(WORKERS)})
        assert counted(records) == expected
        assert len({who for _, who, payload in records if "n" in payload}) == WORKERS


async def test_triggers_on_overlapping_patterns_each_fire(nats_url: str, bus: Bus) -> None:
    requests: list[TurnRequest] = []

    async def agent(request: TurnRequest) -> str:
        requests.append(request)
        return "done"

    def trigger(name: str, on: str) -> Any:
        item = {"name": name, "on": on, "prompt": "{payload.n}", "agent": "overlap-agent", "max_in_flight": 100}
        return config.parse_one(item, "test")

    async with Bus(nats_url, name="overlap-agent") as agent_bus:
        await agent_bus.serve_turns("overlap-agent", agent)
        engine = await TriggerEngine(bus).start()
        try:
            await engine.apply(
                {
                    "all": trigger("all", "eva.custom.*"),
                    "both": trigger("both", "eva.custom.both"),
                    "both_too": trigger("both_too", "eva.custom.both"),
                }
            )
            await bus.flush()
            for n in range(10):
                await bus.emit("eva.custom.both", {"n": n})
            await wait_until(lambda: len(requests) == 30, what="30 turns")
        finally:
            await engine.stop()
    fired = Counter(request.trigger for request in requests)
    assert fired == {"all": 10, "both": 10, "both_too": 10}
