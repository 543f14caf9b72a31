"""Counter buckets: NATS 2.12 message counters under KV-style subjects, each key a number the server adds to.

A counter bucket is a stream that allows message counters
(``allow_msg_counter``): a publish on a key carries only a ``Nats-Incr``
header and the server adds it to the key's last value atomically, answering
with the new total, so any number of processes add to one key without a
lost update. The stream refuses rollup headers, purges and deletes; the
budgets' books are kept so (triggers/agent/_books.py). A total over keys is
one batched direct get of the last message of each key under a prefix.
On a leaf node both go to the hub's bucket (:mod:`bus._transport.home`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import msgspec
import nats.errors as nats_errors
import nats.js.errors as js_errors
from nats.js import api

from bus._core.errors import RegistryError
from bus._core.subjects import kv_key_subject, kv_stream
from bus._transport.bucket_stream import StreamBucket
from bus._transport.home import home_of

_FAILURES = (nats_errors.Error, js_errors.Error, TimeoutError)
#: Seconds a request waits: one the permissions deny gets no answer at all.
TIMEOUT: Final = 2.0
#: Keys one total reads at most (a batch of the direct get API).
MAX_KEYS: Final = 1000
#: The largest count a reader takes; a longer number (the server keeps any) reads as this, with its sign.
MAX_COUNT: Final = 10**18
_MAX_DIGITS: Final = len(str(MAX_COUNT))


def count_of(val: str) -> int:
    """A counter's value as a bounded int: whoever wrote its increments, reading it costs no more than a short one."""
    digits = val.lstrip("+-")
    if not digits.isdigit() or not digits.isascii():
        raise RegistryError(f"a counter's value is not an integer: {val[:40]!r}")
    sign = -1 if val.startswith("-") else 1
    if len(digits.lstrip("0")) > _MAX_DIGITS:
        return sign * MAX_COUNT
    return sign * min(int(digits), MAX_COUNT)


class _Ack(msgspec.Struct):
    val: str = "0"
    error: dict[str, Any] | None = None


class _Value(msgspec.Struct):
    val: str = "0"


def counter_config(name: str, max_age_s: float, replicas: int) -> api.StreamConfig:
    """A counter bucket's stream: counters on, direct gets, no rollups, purges or deletes; keys kept ``max_age_s``."""
    return api.StreamConfig(
        name=kv_stream(name),
        subjects=[kv_key_subject(name) + ">"],
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        max_age=max_age_s,
        max_msgs_per_subject=1,
        discard=api.DiscardPolicy.OLD,
        num_replicas=replicas,
        allow_rollup_hdrs=False,
        allow_direct=True,
        allow_msg_counter=True,
        deny_delete=True,
        deny_purge=True,
    )


class CounterBucket(StreamBucket):
    """One counter bucket: add to a key, sum the keys under a prefix."""

    _timeout = TIMEOUT

    def __init__(self, name: str, nc: Any, max_age_s: float) -> None:
        super().__init__(name, nc, max_age_s)
        #: Batched gets' replies arrive on ``<inbox>.<n>``, one subscription for them all, each routed to its get.
        self._inbox: str | None = None
        self._next = 0
        self._answers: dict[str, asyncio.Queue[Any]] = {}
        self._subscribing = asyncio.Lock()

    def config(self, replicas: int) -> api.StreamConfig:
        return counter_config(self.name, self.max_age_s, replicas)

    async def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to ``key`` (made first if the bucket is missing, where this user may); the new value."""
        try:
            return await self._add(key, amount)
        except nats_errors.NoRespondersError:
            await self.ensure()
        try:
            return await self._add(key, amount)
        except nats_errors.NoRespondersError:
            raise RegistryError(f"bucket {self.name}: no JetStream answers for it") from None

    async def _add(self, key: str, amount: int) -> int:
        headers = {"Nats-Incr": f"{amount:+d}"}
        try:
            subject = (await home_of(self._nc)).kv_write(self._prefix + key)
            reply = await self._nc.request(subject, b"", timeout=TIMEOUT, headers=headers)
        except nats_errors.NoRespondersError:
            raise
        except _FAILURES as exc:  # a denied publish times out: the server drops it
            raise RegistryError(f"bucket {self.name}: add to {key} failed ({type(exc).__name__})") from None
        ack = msgspec.json.decode(reply.data, type=_Ack)
        if ack.error is not None:
            raise RegistryError(f"bucket {self.name}: add to {key} refused ({ack.error.get('description')})")
        return count_of(ack.val)

    async def total(self, *patterns: str) -> dict[str, int]:
        """Each key matching one of ``patterns`` (key patterns: ``day.key.*``) with its value; {} if none."""
        reply, answers = await self._reply_to()
        subjects = [self._prefix + pattern for pattern in patterns]
        request = msgspec.json.encode({"multi_last": subjects, "batch": MAX_KEYS})
        values: dict[str, int] = {}
        try:
            home = await home_of(self._nc)
            await self._nc.publish(home.direct_get(self._stream), request, reply=reply)
            while True:
                msg = await asyncio.wait_for(answers.get(), TIMEOUT)
                headers = msg.headers or {}
                status = headers.get("Status")
                if status == "503":  # nobody answers for the stream: no bucket (a book nobody can read is not 0)
                    raise RegistryError(f"the {self.name} bucket does not exist: start 'hookbus up'")
                if status is not None:  # 204: the end of the batch; 404: no such key
                    break
                subject = headers.get("Nats-Subject", "")
                values[subject[len(self._prefix) :]] = count_of(msgspec.json.decode(msg.data, type=_Value).val)
        except _FAILURES as exc:
            raise RegistryError(f"bucket {self.name}: read {patterns[0]} failed ({type(exc).__name__})") from None
        finally:
            self._answers.pop(reply.rpartition(".")[2], None)
        return values

    async def _reply_to(self) -> tuple[str, asyncio.Queue[Any]]:
        """A reply subject of its own for one batched get, under the bucket's one inbox subscription."""
        async with self._subscribing:  # one subscription, however many gets start at once
            if self._inbox is None:
                inbox = self._nc.new_inbox()
                await self._nc.subscribe(inbox + ".*", cb=self._route)
                self._inbox = inbox
        self._next += 1
        answers: asyncio.Queue[Any] = asyncio.Queue()
        self._answers[str(self._next)] = answers
        return f"{self._inbox}.{self._next}", answers

    async def _route(self, msg: Any) -> None:
        answers = self._answers.get(msg.subject.rpartition(".")[2])
        if answers is not None:
            answers.put_nowait(msg)
