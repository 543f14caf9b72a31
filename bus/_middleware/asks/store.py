"""The asks store: what a kernel, the CLI and (later) the HTTP API, signed links and the console call.

Kernel side: :meth:`AskStore.open` (find the same question's open ask, or
write a new one), :meth:`AskStore.wait` (the answer, or None at the deadline),
:meth:`AskStore.finish`. Operator side: :meth:`AskStore.pending`,
:meth:`AskStore.answer` (first answer wins; refused ones raise
:class:`AskRefused` and are journaled), :meth:`AskStore.watch`. Keys and
records are in :mod:`bus._middleware.asks.records`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from bus._core.decisions import ASK_TIMEOUT_MAX
from bus._core.errors import AskRefused, MiddlewareError
from bus._core.subjects import ASKS_BUCKET
from bus._journal.entries import JournalEntry, publish_entry
from bus._middleware.asks.records import (
    ANSWER_KINDS,
    GRACE_S,
    NO_USER,
    AnswerMsg,
    AskMsg,
    answer_key,
    ask_key,
    decode_answer,
    decode_ask,
    done_key,
    encode_msg,
    fingerprint,
    notify_subject,
    payload_sha256,
)
from bus._transport.port import TRANSPORT_FAILURES, Port

#: The bucket's max age: the longest ask, plus the grace its keys outlive it by.
MAX_AGE_S: Final = ASK_TIMEOUT_MAX + GRACE_S
#: Seconds between reads of the answer key while waiting (the wake-up on the inbox may be lost on a reconnect).
POLL_S: Final = 2.0
#: Asks of one question a kernel looks through before giving up finding a free id.
MAX_REPEATS: Final = 64


@dataclass(frozen=True, slots=True)
class Pending:
    """One ask as operators list it: the record, and its answer if it has one."""

    ask: AskMsg
    answer: AnswerMsg | None = None

    def to_json(self) -> dict[str, Any]:
        """One JSON object per ask (``hookbus asks --json``), with its ``id`` and the seconds left."""
        ask = self.ask
        return {
            "id": ask.id,
            "user": ask.user,
            "agent": ask.agent,
            "session": ask.session,
            "stage": ask.stage,
            "handler": ask.handler,
            "identity": ask.identity,
            "reason": ask.reason,
            "payload": ask.payload,
            "payload_sha256": ask.payload_sha256,
            "asked_at": ask.asked_at,
            "deadline": ask.deadline,
            "left_s": round(max(0.0, ask.deadline - time.time()), 1),
            "on_timeout": ask.on_timeout,
            "answer": None if self.answer is None else self.answer.kind,
        }


class AskStore:
    """The ``hookbus_asks`` bucket seen through one connection."""

    def __init__(self, port: Port) -> None:
        self._port = port
        self._bucket = port.once_bucket(ASKS_BUCKET, MAX_AGE_S)

    @property
    def user(self) -> str:
        """This connection's NATS user, the token its asks are kept under."""
        return self._port.journal_origin or NO_USER

    # The kernel's side.

    async def open(self, ask: AskMsg) -> tuple[AskMsg, bool]:
        """The open ask of the same question if there is one (True: found again), else ``ask`` written anew.

        ``ask.id`` is replaced by the question's id. An ask found again whose
        deadline passed unanswered is returned as it is: the caller reports it expired.
        """
        fp = fingerprint(ask.user, ask.session, ask.stage, ask.handler, ask.payload_sha256)
        for n in range(MAX_REPEATS):
            ask_id = f"{fp}-{n}"
            if await self._bucket.get(done_key(ask.user, ask_id)) is not None:
                continue
            ask.id = ask_id
            ttl = ask.deadline - time.time() + GRACE_S
            if await self._bucket.create(ask_key(ask.user, ask_id), encode_msg(ask), ttl):
                return ask, False
            data = await self._bucket.get(ask_key(ask.user, ask_id))
            found = decode_ask(data) if data is not None else None
            if found is not None and found.payload_sha256 == ask.payload_sha256:
                return found, True
        raise MiddlewareError(f"{MAX_REPEATS} asks of the same call are held for this session: refusing another")

    async def answer_of(self, ask: AskMsg) -> AnswerMsg | None:
        """The ask's answer, if it has a valid one (it must name the ask's payload hash)."""
        data = await self._bucket.get(answer_key(ask.user, ask.id))
        answer = decode_answer(data) if data is not None else None
        if answer is None or answer.payload_sha256 != ask.payload_sha256 or answer.kind not in ANSWER_KINDS:
            return None
        if answer.kind == "edit" and answer.payload is None:
            return None
        return answer

    async def wait(self, ask: AskMsg) -> AnswerMsg | None:
        """The answer, as soon as it comes, or None once the deadline passes."""
        woken = asyncio.Event()

        async def wake(_msg: Any) -> None:
            woken.set()

        sub = await self._port.subscribe_raw(notify_subject(ask.user, ask.id), wake)
        try:
            while True:
                answer = await self.answer_of(ask)
                left = ask.deadline - time.time()
                if answer is not None or left <= 0:
                    return answer
                woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(POLL_S, left))
        finally:
            with contextlib.suppress(*TRANSPORT_FAILURES):
                await sub.unsubscribe()

    async def finish(self, ask: AskMsg) -> None:
        """Mark the ask taken (answered or expired): the same call asked again is a new question."""
        await self._bucket.create(done_key(ask.user, ask.id), b"1", ask.deadline - time.time() + GRACE_S)

    # The operators' side.

    async def find(self, ask_id: str) -> AskMsg | None:
        """The ask of that id (of any user), None if there is none (never asked, or expired and gone)."""
        keys = await self._bucket.keys(f"ask.*.{ask_id}")
        for key in keys:
            data = await self._bucket.get(key)
            ask = decode_ask(data) if data is not None else None
            if ask is not None and ask.id == ask_id and key == ask_key(ask.user, ask_id):
                return ask
        return None

    async def pending(self, user: str | None = None, *, answered: bool = False) -> list[Pending]:
        """The asks waiting for an answer (of ``user`` only, if given), oldest first; ``answered``: answered too."""
        out = []
        for key in await self._bucket.keys(f"ask.{user or '*'}.*"):
            data = await self._bucket.get(key)
            ask = decode_ask(data) if data is not None else None
            if ask is None or key != ask_key(ask.user, ask.id) or ask.deadline <= time.time():
                continue
            if await self._bucket.get(done_key(ask.user, ask.id)) is not None:
                continue
            answer = await self.answer_of(ask)
            if answer is None or answered:
                out.append(Pending(ask, answer))
        return sorted(out, key=lambda item: item.ask.asked_at)

    async def answer(
        self,
        ask_id: str,
        kind: str,
        by: str,
        sha256: str | None = None,
        *,
        reason: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> tuple[AskMsg, AnswerMsg]:
        """Answer an ask once: ``allow``, ``deny`` (with ``reason``) or ``edit`` (with ``payload``), by ``by``.

        ``sha256`` is the payload hash the answerer saw (None: the ask's own, for a person at the CLI who
        just listed it). Journaled either way; AskRefused if the ask is missing or expired, the hash is not
        the ask's, or another answer came first.
        """
        if kind not in ANSWER_KINDS:
            raise AskRefused(ask_id, f"an answer is one of {', '.join(ANSWER_KINDS)}, not {kind!r}")
        if kind == "edit" and not isinstance(payload, dict):
            raise AskRefused(ask_id, "an edit needs the payload (a JSON object) to run on")
        ask = await self.find(ask_id)
        try:
            if ask is None:
                raise AskRefused(ask_id, "no such ask (never asked, or expired)")
            if ask.deadline <= time.time():
                raise AskRefused(ask_id, "its deadline has passed")
            if sha256 is not None and sha256 != ask.payload_sha256:
                raise AskRefused(ask_id, f"it asks about payload {ask.payload_sha256[:16]}…, not {sha256[:16]}…")
            answer = AnswerMsg(
                id=ask_id,
                kind=kind,  # type: ignore[arg-type]  # checked above
                by=by,
                payload_sha256=ask.payload_sha256,
                answered_at=time.time(),
                reason=reason if kind == "deny" else None,
                payload=payload if kind == "edit" else None,
            )
            ttl = ask.deadline - time.time() + GRACE_S
            if not await self._bucket.create(answer_key(ask.user, ask_id), encode_msg(answer), ttl):
                first = await self.answer_of(ask)
                said = f" ({first.kind} by {first.by})" if first else ""
                raise AskRefused(ask_id, f"already answered{said}")
        except AskRefused as exc:
            await self._journal(ask, ask_id, "refused", f"{kind} by {by} refused: {exc.reason}")
            raise
        with contextlib.suppress(*TRANSPORT_FAILURES):
            await self._port.publish_raw(notify_subject(ask.user, ask_id), b"")
        waited = answer.answered_at - ask.asked_at
        await self._journal(ask, ask_id, f"answered {kind}", f"{kind} by {by} after {waited:.1f}s" + _detail(answer))
        return ask, answer

    async def watch(self) -> AsyncIterator[tuple[str, AskMsg | AnswerMsg]]:
        """Each ask and answer written from now on: ("ask", AskMsg) or ("answer", AnswerMsg)."""
        async for key, data in self._bucket.follow(">"):
            kind = key.partition(".")[0]
            if kind == "ask":
                ask = decode_ask(data)
                if ask is not None:
                    yield "ask", ask
            elif kind == "answer":
                answer = decode_answer(data)
                if answer is not None:
                    yield "answer", answer

    async def _journal(self, ask: AskMsg | None, ask_id: str, decision: str, cause: str) -> None:
        point = ask.stage if ask is not None else "ask"
        entry = JournalEntry("middleware", point, "ask", ask.handler if ask else "*", decision, cause=cause)
        if ask is not None:
            entry.session, entry.agent, entry.trace_id = ask.session, ask.agent, ask.call_id or None
        await publish_entry(self._port, entry)


async def ensure_asks_bucket(port: Port) -> None:
    """Create ``hookbus_asks`` if it is missing (``hookbus up``, as the bus role); RegistryError if refused."""
    await port.once_bucket(ASKS_BUCKET, MAX_AGE_S).ensure()


def _detail(answer: AnswerMsg) -> str:
    if answer.kind == "deny":
        return f": {answer.reason or 'no reason given'}"
    if answer.kind == "edit":
        return f": payload {payload_sha256(answer.payload or {})[:16]}…"
    return ""
