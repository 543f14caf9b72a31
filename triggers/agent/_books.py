"""Where the budgets' spending is kept: in the process, or in JetStream where the fleet shares it.

:class:`SharedBooks` keeps one counter bucket per layer
(``hookbus_budget_session``, ``_group``, ``_user``); a key is
``<day>.<key>.<writer>``: the UTC day, the layer's key as one subject token and
the NATS user of the process that spent (its vouched publisher identity, never
a payload field). The server adds each charge to the key atomically, so every
process of an agent adds to the same number and a restart finds the day as it
was. What a key spent today is the sum over the writers whose shares count
for the reader: its own, and those a key was granted to. A user's and a
session's book count an agent once a trigger started a turn of that user's
(in that session) on it (:func:`grant_turn`, written only by the trigger
engine's roles); a group's book counts the group's members as budgets.yaml
names them (``groups:``). So no agent inflates, and so exhausts, the book of
a user, session or group that never handed it a turn. A writer's share counts as at least 0: a
negative ``Nats-Incr`` on its own key lowers no one else's spending. The
shipped permissions let each user write only keys ending in its own name: an
agent cannot lower, reset or erase what another spent (docs/security.md).
Amounts are integers: tokens, or USD in billionths.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Final, Protocol

from bus._client import Bus
from bus._core.subjects import BUDGET_BUCKETS, BUDGET_MAX_AGE_S, TOKEN_RE
from bus._transport.counters import CounterBucket

#: The writer of a process without a NATS user (a server without accounts: one writer for all).
ANONYMOUS: Final = "anyone"
#: A user's (a session's) book counts an agent's share once a trigger started a turn of the user's (in the
#: session) on it that day: ``<day>.<user or session>.<agent's NATS user>.granted``, written only by the
#: worker and bus roles.
GRANTED: Final = "granted"
#: The layers whose books count the writers granted a key by a trigger (the group layer: its declared members).
GRANTED_LAYERS: Final = ("session", "user")


def agent_user(agent: str) -> str:
    """The NATS user an agent serves its turns as, by the shipped convention (triggers' default publishers)."""
    return f"agent-{agent}"


def today() -> str:
    """The books' day: today's UTC date."""
    return datetime.now(UTC).strftime("%Y-%m-%d")


async def grant_turn(
    bus: Bus, user: str | None, agent: str, day: str | None = None, session: str | None = None
) -> None:
    """Let ``agent``'s spending count in ``user``'s book (and ``session``'s) today: a trigger started a turn
    of the user's, in that session, on it.

    RegistryError if the book cannot take it (no ``hookbus up``, or this user may not write grants)."""
    when = day or today()
    for layer, key in (("user", user), ("session", session)):
        if key is not None:
            bucket = bus.port.counter_bucket(BUDGET_BUCKETS[layer], BUDGET_MAX_AGE_S)
            await bucket.add(f"{when}.{token(key)}.{agent_user(agent)}.{GRANTED}", 1)


def token(key: str) -> str:
    """``key`` as one subject token: itself if it is one, else ``~`` and its URL-safe base64."""
    if TOKEN_RE.fullmatch(key):
        return key
    return "~" + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


class Ledger(Protocol):
    """What a key of a layer spent on a day, and adding a charge to it."""

    async def spent(self, layer: str, day: str, key: str) -> int: ...

    async def add(self, layer: str, day: str, key: str, amount: int) -> int:
        """Add ``amount``; what the key has spent now."""
        ...

    async def spent_many(self, books: list[tuple[str, str, str]]) -> list[int]:
        """:meth:`spent` of each (layer, day, key)."""
        ...

    async def add_many(self, charges: list[tuple[str, str, str, int]]) -> list[int]:
        """:meth:`add` of each (layer, day, key, amount)."""
        ...


class LocalBooks:
    """Spending kept in the process (each process its own, a restart starts the day over)."""

    def __init__(self) -> None:
        self._spent: dict[tuple[str, str, str], int] = {}

    async def spent(self, layer: str, day: str, key: str) -> int:
        return self._spent.get((layer, day, key), 0)

    async def add(self, layer: str, day: str, key: str, amount: int) -> int:
        total = self._spent.get((layer, day, key), 0) + amount
        self._spent[layer, day, key] = total
        return total

    async def spent_many(self, books: list[tuple[str, str, str]]) -> list[int]:
        return [self._spent.get(book, 0) for book in books]

    async def add_many(self, charges: list[tuple[str, str, str, int]]) -> list[int]:
        return [await self.add(*charge) for charge in charges]


class SharedBooks:
    """The fleet's books in JetStream counter buckets, this process writing as ``writer``."""

    def __init__(
        self, buckets: dict[str, CounterBucket], writer: str, groups: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        self.buckets = buckets
        self.writer = writer
        #: Per group, the NATS users whose shares its book counts (besides this writer's own).
        self.members = {group: frozenset(map(agent_user, agents)) for group, agents in (groups or {}).items()}

    @classmethod
    def of(cls, bus: Bus, groups: Mapping[str, Iterable[str]] | None = None) -> SharedBooks:
        """The books on ``bus``'s connection, written as its vouched NATS user; ``groups``: each group's agents."""
        buckets = {layer: bus.port.counter_bucket(name, BUDGET_MAX_AGE_S) for layer, name in BUDGET_BUCKETS.items()}
        return cls(buckets, bus.publisher or ANONYMOUS, groups)

    async def ready(self) -> None:
        """Check every book takes this writer's charges (made where this user may): RegistryError naming the
        bucket and what to do (start ``hookbus up``) if not; an agent finds out at start, not at its first call."""
        for bucket in self.buckets.values():
            await bucket.add(f"ready.ready.{self.writer}", 0)

    async def spent(self, layer: str, day: str, key: str) -> int:
        """What the writers that count for this reader spent on ``key`` (see the module's docstring)."""
        book = f"{day}.{token(key)}"
        counted = {self.writer, ANONYMOUS}
        if layer in GRANTED_LAYERS:
            keys = await self.buckets[layer].total(f"{book}.*", f"{book}.*.{GRANTED}")
            counted |= {key.split(".")[2] for key in keys if key.endswith("." + GRANTED)}
        else:
            keys = await self.buckets[layer].total(f"{book}.*")
            counted |= self.members.get(key, frozenset())
        return sum(max(0, value) for key, value in keys.items() if key.count(".") == 2 and key.split(".")[2] in counted)

    async def add(self, layer: str, day: str, key: str, amount: int) -> int:
        mine = f"{day}.{token(key)}"
        await self.buckets[layer].add(f"{mine}.{self.writer}", amount)
        return await self.spent(layer, day, key)

    async def spent_many(self, books: list[tuple[str, str, str]]) -> list[int]:
        """Every layer at once: one batched direct get each, in flight together."""
        return list(await asyncio.gather(*(self.spent(*book) for book in books)))

    async def add_many(self, charges: list[tuple[str, str, str, int]]) -> list[int]:
        return list(await asyncio.gather(*(self.add(*charge) for charge in charges)))
