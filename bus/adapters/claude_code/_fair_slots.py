"""Fair shares of the relay's slots: no asker holds more than its cap, the rest wait in turn per asker.

The relay answers a bounded number of requests at once. Taken first come,
first served, one agent sending a flood would hold every slot and the others'
hooks would wait behind it; here each asker (the NATS user its request
subject names) has at most ``per_user`` requests running, waiting ones are
started round-robin across askers, and what waits is bounded per asker and in
all: a request over those bounds is refused at once (the caller answers it
with an error), never queued without end.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final

#: The key of requests whose subject names no user (a connection without a user name): they cannot be told
#: apart, so together they may take every slot (a bus without user names has no askers to be fair among).
ANONYMOUS: Final = ""


class FairSlots:
    """``total`` slots shared among askers, ``per_user`` at most each; ``start(job)`` runs a job in a slot."""

    def __init__(self, total: int, per_user: int, waiting_per_user: int, waiting_total: int) -> None:
        self.total, self.per_user = total, per_user
        self._waiting_per_user, self._waiting_total = waiting_per_user, waiting_total
        self._running: dict[str, int] = {}
        self._in_use = 0
        self._waiting: OrderedDict[str, deque[Callable[[], Any]]] = OrderedDict()
        self._queued = 0

    def offer(self, user: str, job: Callable[[], Any]) -> str | None:
        """Run ``job`` now if ``user`` may, else queue it; the reason it was refused, or None."""
        if self._in_use < self.total and self._running.get(user, 0) < self._cap(user) and user not in self._waiting:
            self._run(user, job)
            return None
        queue = self._waiting.get(user)
        if queue is not None and len(queue) >= self._waiting_per_user:
            return f"{self._waiting_per_user} requests of {user or 'this connection'} already wait; refused"
        if self._queued >= self._waiting_total:
            return f"{self._waiting_total} requests already wait for the relay; refused"
        if queue is None:
            queue = self._waiting[user] = deque()
        queue.append(job)
        self._queued += 1
        return None

    def release(self, user: str) -> None:
        """A job of ``user`` ended: give its slot to the next asker in turn that may run."""
        left = self._running[user] - 1
        if left:
            self._running[user] = left
        else:
            del self._running[user]
        self._in_use -= 1
        for candidate in list(self._waiting):
            if self._in_use >= self.total:
                return
            if self._running.get(candidate, 0) >= self._cap(candidate):
                continue
            queue = self._waiting[candidate]
            job = queue.popleft()
            self._queued -= 1
            if queue:
                self._waiting.move_to_end(candidate)  # its next one waits for the others' turns
            else:
                del self._waiting[candidate]
            self._run(candidate, job)

    def running(self, user: str) -> int:
        """How many of ``user``'s jobs hold a slot now."""
        return self._running.get(user, 0)

    def _cap(self, user: str) -> int:
        return self.total if user == ANONYMOUS else self.per_user

    def _run(self, user: str, job: Callable[[], Any]) -> None:
        self._running[user] = self._running.get(user, 0) + 1
        self._in_use += 1
        job()
