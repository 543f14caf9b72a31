"""The shared journal: one entry format for everything that intervened or reacted.

Middleware reactions, shell-hook runs, subscriber errors and trigger firings
all become a :class:`JournalEntry`, published on ``hookbus.journal.<kind>``.
A JetStream stream captures that subject space, so a sink that was down writes
every entry once it is back (see ``subscribers.journal.sink``).

Entries record what a hook *did*, never the payload it saw: a redacting hook
must not have its secret written to the journal by the journal.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import orjson

from bus._core.clock import format_timestamp, now_timestamp
from bus._core.encoder import Encoder
from bus._core.errors import BusClosedError, JournalError
from bus._core.schema import decode
from bus._journal.schema import JOURNAL_MAX_DEPTH, JOURNAL_MAX_DURATION_MS, JournalEntryMsg
from bus._journal.subjects import JOURNAL_PREFIX, JOURNAL_STREAM
from bus._runtime.tasks import TaskSet
from bus._transport.port import TRANSPORT_FAILURES, Port
from bus._transport.streams import StreamSpec, StreamState

log = logging.getLogger("hookbus.journal")

SUBJECT_PREFIX: Final = JOURNAL_PREFIX
STREAM: Final = JOURNAL_STREAM
#: The kinds of entry; each is the last token of its subject.
KINDS: Final = ("middleware", "shell_hook", "subscriber", "trigger")
#: How long the stream keeps entries a sink has not taken yet, and how much of them.
STREAM_MAX_AGE_S: Final = 7 * 24 * 3600
STREAM_MAX_BYTES: Final = 1024 * 1024 * 1024

_ids = Encoder()  # only for its unique-id generator
_new_id = _ids.new_id
_dumps = orjson.dumps
PROCESS: Final = f"{socket.gethostname()}:{os.getpid()}"


class _MalformedEntry(JournalError):
    """Not a JSON object at all (not JSON, not UTF-8, an array ...)."""

    reason = "malformed"


class _WrongKind(JournalError):
    """An unknown kind, or not the kind of the subject it came on."""

    reason = "kind"


@dataclass(slots=True)
class JournalEntry:
    """One intervention or reaction.

    ``point`` is the stage (``tool.call``) or the subject; ``phase`` says where
    in the point's life it happened (``request``, ``result``, ``run``, ``fire``);
    ``who`` names the handler, hook or trigger and ``identity`` its identity
    hash where it has one; ``decision`` is the outcome (``continue``,
    ``cancel``, ``patch``, ``absent``, ``failed``, ``timeout``, ``denied``,
    ``ok``, ``exit_nonzero``, ``refused``, ``fired``, ``suppressed`` ...) and
    ``cause`` why.
    """

    kind: str
    point: str
    phase: str
    who: str
    decision: str
    cause: str | None = None
    duration_ms: float | None = None
    session: str | None = None
    agent: str | None = None
    depth: int = 0
    trace_id: str | None = None
    identity: str | None = None
    process: str = PROCESS
    time: str = ""
    id: str = field(default_factory=_ids.new_id)
    #: A shell hook run's last output (stdout and stderr apart), as text; None when it printed nothing.
    stdout: str | None = None
    stderr: str | None = None
    #: Who decided (middleware): the module version called, the rule's condition, the SHA-256 of the payload
    #: the handler was sent, what a patch changed, the fail mode a fault was read by, the kernel's host:pid.
    version: str | None = None
    rule: str | None = None
    payload_sha256: str | None = None
    changed: str | None = None
    fail_mode: str | None = None
    kernel: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise JournalError(f"journal kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.time:
            self.time = now_timestamp()

    def subject(self, origin: str | None) -> str:
        """``hookbus.journal.<kind>.<origin>``: the origin is the publisher's NATS user (see journal_origin)."""
        return journal_subject(self.kind, origin)

    def encode(self) -> bytes:
        return orjson.dumps(self)  # orjson encodes dataclasses itself: as asdict(), several times faster


def canonical_time(text: str) -> str:
    """An RFC 3339 time (any offset, optional fraction, or a bare date) in the journal's own form."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise JournalError(f"{text!r} is not an RFC 3339 time such as 2026-11-30T10:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return format_timestamp(int(moment.timestamp() * 1000))


async def publish_entry(bus: Port, entry: JournalEntry) -> bool:
    """Publish ``entry`` (fire-and-forget, like emit); False if it could not be sent."""
    try:
        await bus.publish_raw(entry.subject(bus.journal_origin), entry.encode())
    except BusClosedError:
        bus.stats.dropped.add("journal")
        return False
    except TRANSPORT_FAILURES:
        bus.stats.dropped.add("journal")
        return False
    return True


#: What a hot path hands the publisher instead of entries: called at flush time, it builds them.
EntryBuilder = Callable[[], list[JournalEntry]]
T = TypeVar("T")
#: The same for entries of one kind built straight as their JSON (:func:`entry_json`).
EncodedBuilder = Callable[[], list[bytes]]


def entry_json(
    kind: str,
    point: str,
    phase: str,
    who: str,
    decision: str,
    cause: str | None,
    duration_ms: float | None,
    session: str | None,
    agent: str | None,
    depth: int,
    trace_id: str | None,
    identity: str | None,
    process: str,
    time: str,
    version: str | None,
    rule: str | None,
    payload_sha256: str | None,
    changed: str | None,
    fail_mode: str | None,
    kernel: str | None,
) -> bytes:
    """The bytes ``JournalEntry(...).encode()`` writes for these fields, a fresh id and no hook output, without
    making the entry: the kernel's entry per reaction (making and encoding the dataclass cost twice as much)."""
    return _dumps(
        {
            "kind": kind,
            "point": point,
            "phase": phase,
            "who": who,
            "decision": decision,
            "cause": cause,
            "duration_ms": duration_ms,
            "session": session,
            "agent": agent,
            "depth": depth,
            "trace_id": trace_id,
            "identity": identity,
            "process": process,
            "time": time,
            "id": _new_id(),
            "stdout": None,
            "stderr": None,
            "version": version,
            "rule": rule,
            "payload_sha256": payload_sha256,
            "changed": changed,
            "fail_mode": fail_mode,
            "kernel": kernel,
        }
    )


class JournalPublisher:
    """Publishes entries off the caller's path: each waits up to ``window`` seconds for company.

    For hot paths (middleware records a reaction per handler per call):
    awaiting one publish per entry added a write to every call and about a
    fifth to its latency (bench/bench_middleware.py). A hot path may hand a
    builder instead of entries (:meth:`add_later`): the entries are made and
    encoded when the window ends, off the call's path. Entries still go out
    one message each, in the order they were given, on the fast publisher.
    """

    def __init__(self, bus: Port, window: float = 0.005, max_batch: int = 200) -> None:
        self._bus = bus
        self._window = window
        self._max_batch = max_batch
        self._pending: list[JournalEntry | EntryBuilder | tuple[str, EncodedBuilder]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: TaskSet[None] = TaskSet()

    @property
    def pending(self) -> int:
        """Entries (or builders of entries) queued and not yet published."""
        return len(self._pending)

    def add(self, entries: list[JournalEntry]) -> None:
        """Queue entries (kept together and in order)."""
        self._pending.extend(entries)
        self._queued()

    def add_later(self, build: EntryBuilder) -> None:
        """Queue the entries ``build`` returns when called at publishing time (their order kept)."""
        self._pending.append(build)
        self._queued()

    def add_encoded_later(self, kind: str, build: EncodedBuilder) -> None:
        """Queue the encoded entries of ``kind`` that ``build`` returns when called at publishing time."""
        self._pending.append((kind, build))
        self._queued()

    def _queued(self) -> None:
        if len(self._pending) >= self._max_batch:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._window, self.flush)

    def flush(self) -> None:
        """Publish what is queued now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        for item in pending:
            if isinstance(item, JournalEntry):
                self._publish(item)
                continue
            if isinstance(item, tuple):
                self._publish_encoded(*item)
                continue
            for entry in _built(item):
                self._publish(entry)

    def _publish_encoded(self, kind: str, build: EncodedBuilder) -> None:
        subject = journal_subject(kind, self._bus.journal_origin)
        for data in _built(build):
            self._push(subject, data)

    def _publish(self, entry: JournalEntry) -> None:
        try:
            subject, data = entry.subject(self._bus.journal_origin), entry.encode()
        except Exception as exc:
            log.warning("journal entry not published: %r", exc)
            return
        self._push(subject, data)

    def _push(self, subject: str, data: bytes) -> None:
        try:
            waiting = self._bus.push_now(subject, data)  # rarely waits
        except Exception as exc:
            log.warning("journal entry not published: %r", exc)
            return
        if waiting is not None:
            self._sending.start(waiting)

    async def drain(self, timeout: float = 2.0) -> None:
        """Publish what is queued and wait (bounded) until it went out: for closing."""
        self.flush()
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=timeout)


async def ensure_journal_stream(bus: Port, replicas: int | None = None) -> StreamState:
    """Create (or update) the JetStream stream that captures every journal entry; return its state.

    ``replicas`` defaults to 3 on a cluster of three or more nodes, else 1.
    """
    spec = StreamSpec(
        name=STREAM,
        subjects=(f"{SUBJECT_PREFIX}.>",),
        max_age_s=STREAM_MAX_AGE_S,
        max_bytes=STREAM_MAX_BYTES,
        duplicate_window_s=120,
        replicas=replicas,
    )
    return await bus.ensure_stream(spec)


#: Longest text a field keeps (longer is cut, marked with an ellipsis): names and ids, and the cause.
TEXT_CAP: Final = 256
CAUSE_CAP: Final = 4096
#: Longest hook output a stream keeps (characters); longer keeps its end, marked with a leading ellipsis.
OUTPUT_CAP: Final = 8192
#: The output fields: their clamp keeps the end, where a failing hook says why.
_TAIL_FIELDS: Final = ("stdout", "stderr")
#: Depths the journal takes: far beyond any recursion limit, and well inside SQLite's integers.
MAX_DEPTH: Final = JOURNAL_MAX_DEPTH
MAX_DURATION_MS: Final = JOURNAL_MAX_DURATION_MS

_TEXT_FIELDS: Final = ("kind", "point", "phase", "who", "decision", "process", "time", "id")
#: The fields that say who decided a middleware call: optional, absent from an entry's JSON form when empty
#: (a row stored before them hashes as it did).
DECIDER_FIELDS: Final = ("version", "rule", "payload_sha256", "changed", "fail_mode", "kernel")
_OPTIONAL_TEXT: Final = ("cause", "session", "agent", "trace_id", "identity", *_TAIL_FIELDS, *DECIDER_FIELDS)
_CAPS: Final = {"cause": CAUSE_CAP, "stdout": OUTPUT_CAP, "stderr": OUTPUT_CAP, "rule": CAUSE_CAP, "changed": CAUSE_CAP}
_TEXT_RULES: Final = tuple((name, _CAPS.get(name, TEXT_CAP)) for name in _TEXT_FIELDS + _OPTIONAL_TEXT)


def decode_entry(data: bytes, subject: str | None = None) -> JournalEntry:
    """Decode a journal entry, naming what is wrong if it is not one (see :func:`decode_checked`)."""
    return decode_checked(data, subject)[0]


def decode_checked(data: bytes, subject: str | None = None) -> tuple[JournalEntry, tuple[str, ...]]:
    """Decode, check and clamp an entry from anyone; also return the names of the fields that were cut.

    Whatever it returns can be stored: texts are capped (``TEXT_CAP``, the
    cause ``CAUSE_CAP``) with NUL replaced by U+FFFD, numbers are in range,
    the time is canonical, and the kind is the one of ``subject`` (when given),
    so a publisher allowed one kind cannot write another. Anything else raises
    :class:`JournalError` naming the field.
    """
    entry = decode(data, JournalEntryMsg, "journal entry", JournalError, malformed=_MalformedEntry)
    kind = entry.kind
    if kind not in KINDS:
        raise _WrongKind(f"journal entry kind {_shown(kind)} is not one of {', '.join(KINDS)}")
    if subject is not None and subject_kind(subject) != kind:
        raise _WrongKind(f"journal entry of kind {kind!r} came on {_shown(subject)}, not {SUBJECT_PREFIX}.{kind}.>")
    fields: dict[str, Any] = {}
    cut: list[str] = []
    for name, cap in _TEXT_RULES:  # the schema checked the types; the clamp keeps what is stored bounded
        value = getattr(entry, name)
        if value is None:
            continue
        if len(value) > cap or "\x00" in value:
            value = _clamped(value, cap, name, cut)
        fields[name] = value
    fields["time"] = _checked_time(fields["time"])
    fields["duration_ms"] = entry.duration_ms
    fields["depth"] = entry.depth
    return JournalEntry(**fields), tuple(cut)


def journal_subject(kind: str, origin: str | None) -> str:
    """``hookbus.journal.<kind>.<origin>``: the origin is the publisher's NATS user (see journal_origin)."""
    return f"{SUBJECT_PREFIX}.{kind}.{origin}" if origin else f"{SUBJECT_PREFIX}.{kind}"


def _built(build: Callable[[], list[T]]) -> list[T]:
    """What a queued builder returns, or nothing when it fails (logged: the journal never breaks a call)."""
    try:
        return build()
    except Exception as exc:
        log.warning("journal entries not built: %r", exc)
        return []


def subject_kind(subject: str) -> str | None:
    """The kind a journal subject names (``hookbus.journal.<kind>[.<origin>]``), or None."""
    tokens = subject.split(".")
    if len(tokens) not in (3, 4) or f"{tokens[0]}.{tokens[1]}" != SUBJECT_PREFIX:
        return None
    return tokens[2]


def subject_origin(subject: str) -> str | None:
    """The publisher's user a journal subject ends with, if it has one: the permissions vouch for it."""
    tokens = subject.split(".")
    return tokens[3] if len(tokens) == 4 else None


def _shown(value: object) -> str:
    """A value for an error message, itself capped: the message is logged."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _clamped(value: str, cap: int, name: str, cut: list[str]) -> str:
    if "\x00" in value:  # a NUL ends the text for C readers of the database and of logs
        value = value.replace("\x00", "\ufffd")
    if len(value) > cap:
        cut.append(name)
        value = "…" + value[len(value) - cap + 1 :] if name in _TAIL_FIELDS else value[: cap - 1] + "…"
    return value


def output_tail(data: bytes, cap: int = OUTPUT_CAP) -> str | None:
    """A hook's output bytes as journal text: decoded (bad UTF-8 replaced), its end kept; None if empty."""
    if not data:
        return None
    text = data.decode(errors="replace").replace("\x00", "\ufffd")
    return text if len(text) <= cap else "…" + text[len(text) - cap + 1 :]


def _checked_time(text: str) -> str:
    try:
        if len(text) == 24 and text[10] == "T" and text[19] == "." and text[-1] == "Z":  # as sent: canonical
            datetime.fromisoformat(text)  # a real date and time (a fifth of reformatting it)
            return text
        return canonical_time(text)
    except (JournalError, ValueError, OverflowError, OSError):
        raise JournalError(f"journal entry field 'time' {_shown(text)} is not an RFC 3339 time") from None
