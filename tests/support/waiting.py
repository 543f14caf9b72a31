"""Waiting in tests without fixed sleeps: poll a condition with a bound, or send a barrier message.

A test that checks that something did NOT arrive sends a barrier after it, from
the same publisher to the same subscription, and waits for the barrier: NATS
keeps one connection's messages in order to a subscriber, and a subscription
calls its handler in arrival order, so once the barrier is in, anything sent
before it has arrived too. Only then is absence a fact rather than a guess.
When what must not arrive comes from another connection, that connection's
``Bus.flush()`` first: once it returns the server has routed (or refused) it,
so a barrier published afterwards, from any connection, is queued behind it.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable

from bus import Bus, Event
from bus.testing import EventRecorder

BARRIER_KEY = "barrier"


async def wait_until(condition: Callable[[], object], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``condition`` (plain or async) until it is true; fail naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await _holds(condition):
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def _holds(condition: Callable[[], object]) -> bool:
    result = condition()
    if inspect.isawaitable(result):
        result = await result
    return bool(result)


async def probe_until(
    send: Callable[[], Awaitable[object]], arrived: Callable[[], object], timeout: float = 15.0, what: str = "a probe"
) -> None:
    """Send probes until one has arrived, for interest that reaches the publisher's server
    some time after the subscriber's flush (over cluster routes, after a reconnect)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        await send()
        next_probe = loop.time() + 0.1  # a probe's round trip, with room to spare
        while loop.time() < next_probe:
            if await _holds(arrived):
                return
            await asyncio.sleep(0.01)
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} to arrive")


async def wait_for_interest(publisher: Bus, subscriber: Bus, timeout: float = 15.0) -> None:
    """Wait until ``publisher``'s server knows every subscription ``subscriber`` has made so far.

    In a cluster, interest reaches the other nodes over the routes some time after
    the subscriber's flush, in the order the subscriptions were made. So a fresh
    probe subscription, made last: once a probe to it arrives, the earlier
    subscriptions are known on the publisher's node too.
    """
    probes = EventRecorder()
    subject = f"eva.custom.probe_{uuid.uuid4().hex[:8]}"
    subscription = await subscriber.subscribe(subject, probes)
    await subscriber.flush()
    await probe_until(
        lambda: publisher.emit(subject, barrier_payload()), lambda: probes.events, timeout, f"a probe on {subject}"
    )
    await subscription.unsubscribe()


def barrier_payload() -> dict[str, str]:
    """The payload of a fresh barrier event: a token nobody else sends."""
    return {BARRIER_KEY: uuid.uuid4().hex}


def is_barrier(event: Event) -> bool:
    return BARRIER_KEY in event.payload


def without_barriers(events: Iterable[Event]) -> list[Event]:
    """The events a test sent, without the barriers it sent to know they all arrived."""
    return [event for event in events if not is_barrier(event)]


async def barrier(bus: Bus, subject: str, recorder: EventRecorder, timeout: float = 10.0) -> None:
    """Emit a barrier on ``subject`` from ``bus`` and wait until ``recorder`` has it.

    ``recorder`` must hear ``subject`` on the subscription whose absences the
    test asserts, and ``bus`` must be the publisher of what must not arrive.
    """
    payload = barrier_payload()
    await bus.emit(subject, payload)
    await wait_until(
        lambda: any(event.payload == payload for event in recorder.events), timeout, f"the barrier on {subject}"
    )
