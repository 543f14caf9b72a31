"""The console's live view: events as they cross the bus, streamed to browsers as server-sent events.

One subscription (made while at least one viewer watches) fans out to every
viewer. Each viewer gets at most ``DISPLAY_RATE`` events a second on average
(a token bucket holding one second's worth, so the jitter of a steady rate is
not sampled), in batches every ``WINDOW_S``: above that the newest of each
window are kept and the rest counted, and the viewer is told how many were
skipped (a sampled display, said so on the page). So a flood costs ``hookbus up`` a filter test and an append
per event and viewer, never a write per event, and a slow browser only makes
its own windows late. The last ``KEEP`` events (``KEEP_BYTES`` at most) are
kept by id so that a viewer can ask for one's whole payload (a claimed
payload is fetched and checked), also after changing its filter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from bus._client import Bus, Subscription
from bus._core.envelope import Event
from bus._core.errors import HookbusError
from bus._core.subjects import EVA_DOMAIN, PRX_DOMAIN, hides_internal, is_internal, matches, normalise_pattern

log = logging.getLogger("hookbus.console")

#: Events a second one viewer is sent at most; above it the display is sampled (bench/bench_console.py).
DISPLAY_RATE: Final = 1000
#: How often a viewer is sent what arrived (a batch per window).
WINDOW_S: Final = 0.1
#: Events kept by id for "show the whole payload" (as many as the page shows), and their bytes at most.
KEEP: Final = 500
KEEP_BYTES: Final = 16 * 1024 * 1024
#: A payload larger than this (encoded) is sent cut to a preview; the page fetches it whole on demand.
PREVIEW_BYTES: Final = 8 * 1024
#: The default filter: every event (internal subjects are never events).
EVERY_EVENT: Final = ">"
#: What the live view subscribes to: the two event domains (what the bus role may read).
DOMAINS: Final = (f"{PRX_DOMAIN}.>", f"{EVA_DOMAIN}.>")


@dataclass(frozen=True, slots=True)
class LiveFilter:
    """Which events a viewer wants: a subject pattern (NATS or PRX style), a session, an agent (``source``)."""

    pattern: str = EVERY_EVENT
    session: str | None = None
    agent: str | None = None

    @classmethod
    def of(cls, pattern: str | None, session: str | None, agent: str | None) -> LiveFilter:
        """Raises SubjectError (naming the pattern) for a pattern that is not one."""
        return cls(normalise_pattern(pattern or EVERY_EVENT), session or None, agent or None)

    def wants(self, event: Event) -> bool:
        if self.session is not None and event.session_id != self.session:
            return False
        if self.agent is not None and event.source != self.agent:
            return False
        if hides_internal(self.pattern) and is_internal(event.subject):
            return False
        return matches(self.pattern, event.subject)


@dataclass(eq=False)
class Viewer:
    """One browser watching: its filter, the events of the current window, and how many it missed."""

    filter: LiveFilter
    rate: int
    window: deque[Event] = field(init=False)
    arrived: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when the feed closes (``hookbus up`` stopping): the stream ends instead of holding the shutdown.
    ended: bool = False
    #: Events the viewer may be sent now: refilled at ``rate`` a second, up to one second's worth.
    tokens: float = field(init=False)
    _filled_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.window = deque(maxlen=self.rate)  # the newest are kept; never more than a second's worth
        self.tokens = float(self.rate)
        self._filled_at = time.monotonic()

    def offer(self, event: Event) -> None:
        if self.filter.wants(event):
            self.window.append(event)
            self.arrived += 1
            self.ready.set()

    def take(self) -> tuple[list[Event], int]:
        """The window's events the bucket allows (the newest) and how many others arrived (sampled out)."""
        now = time.monotonic()
        self.tokens = min(float(self.rate), self.tokens + (now - self._filled_at) * self.rate)
        self._filled_at = now
        allowed = min(len(self.window), int(self.tokens))
        events = list(self.window)[len(self.window) - allowed :]
        self.tokens -= allowed
        skipped = self.arrived - allowed
        self.window.clear()
        self.arrived = 0
        self.ready.clear()
        return events, skipped


class LiveFeed:
    """The one subscription behind every viewer, made on the first viewer and ended with the last."""

    def __init__(self, bus: Bus, rate: int = DISPLAY_RATE) -> None:
        self._bus = bus
        self.rate = rate
        self._viewers: set[Viewer] = set()
        self._subscriptions: list[Subscription] = []
        self._recent: OrderedDict[str, Event] = OrderedDict()
        self._recent_bytes = 0
        self._lock = asyncio.Lock()

    async def join(self, wanted: LiveFilter) -> Viewer:
        viewer = Viewer(wanted, self.rate)
        async with self._lock:
            self._viewers.add(viewer)
            if not self._subscriptions:
                self._subscriptions = [await self._bus.subscribe(domain, self._on_event) for domain in DOMAINS]
                await self._bus.flush()  # interest registered: events sent from now on arrive
        return viewer

    async def leave(self, viewer: Viewer) -> None:
        async with self._lock:
            self._viewers.discard(viewer)
            if not self._viewers:
                await self._unsubscribe()

    async def close(self) -> None:
        """End every viewer's stream and the subscription (the HTTP server's shutdown waits for open streams)."""
        async with self._lock:
            for viewer in self._viewers:
                viewer.ended = True
                viewer.ready.set()
            self._viewers.clear()
            await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            with contextlib.suppress(HookbusError):  # the connection may be closing: nothing left to end
                await subscription.unsubscribe()

    async def _on_event(self, event: Event) -> None:
        recent = self._recent
        known = recent.pop(event.id, None)  # an id is the sender's word: a repeat replaces, never leaks
        if known is not None:
            self._recent_bytes -= len(known.raw)
        recent[event.id] = event
        self._recent_bytes += len(event.raw)
        while len(recent) > KEEP or self._recent_bytes > KEEP_BYTES:
            self._recent_bytes -= len(recent.popitem(last=False)[1].raw)
        for viewer in self._viewers:
            viewer.offer(event)

    def recent(self, event_id: str) -> Event | None:
        return self._recent.get(event_id)


def shown(event: Event) -> dict[str, Any]:
    """An event as the page gets it: the envelope, subject and vouched publisher; a large payload as a cut
    preview, flagged."""
    out: dict[str, Any] = {"subject": event.subject, **event.to_dict()}
    if event.publisher is not None:  # vouched by the subject it came on, never the body's claim
        out["publisher"] = event.publisher
    if event.payload_ref is not None:
        out["payload_whole_on_demand"] = True
    if len(event.raw) > PREVIEW_BYTES:
        text = orjson.dumps(event.payload).decode()
        out["payload"] = {"preview": text[:PREVIEW_BYTES] + "…"}
        out["payload_whole_on_demand"] = True
    return out


def sse(name: str, data: Any) -> bytes:
    """One server-sent event: ``event: name`` and its JSON on one ``data:`` line (JSON has no raw newline)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def next_batch(viewer: Viewer, keepalive_s: float) -> bytes:
    """What to send the viewer next: a window's events (and the sampled count), or a keep-alive comment."""
    try:
        await asyncio.wait_for(viewer.ready.wait(), keepalive_s)
    except TimeoutError:
        return b": keep-alive\n\n"
    if viewer.ended:
        return b""
    await asyncio.sleep(WINDOW_S)  # the window: what arrives in it goes out in one write
    events, skipped = viewer.take()
    out = sse("events", [shown(event) for event in events])
    if skipped:
        out += sse("sampled", {"skipped": skipped, "window_s": WINDOW_S, "rate": round(len(events) / WINDOW_S)})
    return out
