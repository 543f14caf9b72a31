"""The base errors of hookbus: the protocol's, the connection's, and the bases each feature's errors derive from.

A feature declares its own errors in its package's ``errors.py`` (the shell
hooks in ``subscribers/shell_hooks/_errors.py``, turns in ``bus/_turns/errors.py``,
a handler's run in ``bus/_runtime/errors.py`` ...), each deriving from a class
here. The tree of this module::

    HookbusError
    ├── ConfigError            a setting, flag or config file is wrong
    ├── ConnectError           the bus could not be reached (names the URL)
    ├── PublishDenied          the server's permissions refused a publish (names the subject)
    ├── BusClosedError         the Bus was used after close(), or before start
    ├── SyncCallError          a SyncBus call waited past its timeout, or came from its own loop thread
    ├── ServerError            the embedded nats-server would not start
    │   └── PortInUse              its port is taken (names host and port)
    ├── SubjectError           a subject or pattern breaks the subject rules (also ValueError)
    ├── PayloadError           a payload cannot be sent (also ValueError)
    │   ├── NotSerializableError   not JSON-serialisable
    │   ├── PayloadTooLarge        over the size limit even after truncation
    │   └── CatalogError           strict mode: does not match the event catalog
    ├── EnvelopeError          bytes from the bus are not a valid event envelope
    ├── PayloadRefError        a claim-check reference is refused, or its whole payload cannot be had
    ├── MiddlewareError        the middleware could not do what was asked
    │   ├── StageError             a stage name breaks the stage rules (also ValueError)
    │   ├── DeclarationError       a handler declaration is invalid (also ValueError)
    │   ├── RecordError            a stored handler record is invalid, or cannot be read or written (also ValueError)
    │   ├── DecisionError          a reply is not a valid decision (names who sent it)
    │   ├── AskRefused             an answer to an ask is refused: missing, expired, another payload, answered
    │   ├── RegistryError          the registry/trust store (JetStream KV) is unavailable
    │   ├── BrokenChain            a stage's declarations cannot be ordered
    │   ├── ForeignAnnouncement    a registry entry claims another module's name (also ValueError)
    │   └── TooManyHandlers        an announcement over the handler cap (also ValueError)
    ├── TransportError         a message could not be carried, or a request got no usable answer
    │   ├── NotSent                the connection did not take a message (names the drop reason)
    │   ├── NoResponders           nobody subscribes to the subject
    │   ├── RequestTimeout         no reply within the timeout
    │   └── Aborted                the requester was closed while the request was pending
    └── JournalError           bytes on a journal subject are not a valid entry

Transport trouble during ``emit`` is never raised: it is counted as a drop.
Errors carry the context they are about (subject, size, URL) as attributes.
"""

from __future__ import annotations

from errno import ECONNREFUSED as _ECONNREFUSED
from string import Formatter
from typing import Any, ClassVar


class HookbusError(Exception):
    """Base class of every error hookbus raises on purpose."""


class _AboutError(HookbusError):
    """The body of the errors about one thing and why, each declared by its message alone:
    ``class StageError(_AboutError, message="invalid stage {stage!r}: {reason}")`` takes
    ``StageError(stage, reason)`` and keeps them as its attributes ``stage`` and ``reason``."""

    _about: ClassVar[str]
    _message: ClassVar[str]
    reason: str

    def __init_subclass__(cls, message: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if message:
            cls._message = message
            cls._about = next(name for _, name, _, _ in Formatter().parse(message) if name and name != "reason")

    def __init__(self, about: object, reason: str) -> None:
        setattr(self, self._about, about)
        self.reason = reason
        super().__init__(self._message.format_map({self._about: about, "reason": reason}))


class ConfigError(HookbusError):
    """A setting, command-line flag or configuration file is invalid."""


class ConnectError(HookbusError):
    """The NATS server could not be reached within the retry budget."""

    def __init__(self, servers: list[str], cause: BaseException | None = None) -> None:
        self.servers = servers
        self.cause = cause
        #: Nobody listens at the address (no server there), rather than a refusal, a timeout or a TLS problem.
        self.refused = isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == _ECONNREFUSED
        shown = ", ".join(_without_secret(url) for url in servers)
        if self.refused:
            super().__init__(f"no NATS server at {shown} (connection refused)")
            return
        detail = f": {cause}" if cause is not None and str(cause) else ""
        kind = f" ({type(cause).__name__})" if cause is not None else ""
        hint = ""
        if cause is not None and "authorization violation" in str(cause).lower():
            hint = " (the server refused the credentials: check user/password, token, nkey or creds file)"
        super().__init__(f"cannot connect to NATS at {shown}{kind}{detail}{hint}")


def _without_secret(url: str) -> str:
    """A server URL as shown in messages: a password or token in it replaced by ``***``."""
    scheme, sep, rest = url.rpartition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}:***@{host}" if colon else f"{scheme}{sep}***@{host}"


class PublishDenied(HookbusError):
    """The NATS server refused a publish: the connection's user may not publish to the subject."""

    def __init__(self, subject: str, detail: str) -> None:
        self.subject = subject
        self.detail = detail
        super().__init__(f"the NATS server denied publishing to {subject!r} ({detail})")


class BusClosedError(HookbusError):
    """The Bus is not open: it was closed, or never started."""


class SyncCallError(HookbusError):
    """A SyncBus call cannot be waited for: past its timeout, or made from the SyncBus's own loop thread."""


class ServerError(HookbusError):
    """The embedded nats-server could not be started."""


class PortInUse(ServerError):
    """The embedded nats-server could not listen: another process holds its address."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        super().__init__(f"port {port} on {host} is already in use")


class SubjectError(_AboutError, ValueError, message="invalid subject {subject!r}: {reason}"):
    """A subject or subscription pattern does not follow the subject rules."""

    subject: object


class PayloadError(_AboutError, ValueError, message="payload for {subject!r}: {reason}"):
    """A payload cannot be turned into an event."""

    subject: str


class NotSerializableError(PayloadError):
    """The payload (or session id) cannot be encoded as JSON."""


class PayloadTooLarge(PayloadError):
    """The encoded event exceeds the size limit even after truncation."""

    def __init__(self, subject: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            subject,
            f"encoded event is {size} bytes after truncating strings, over the {limit}-byte limit",
        )


class CatalogError(PayloadError):
    """Strict mode: a catalogued event's payload lacks a field or has a wrong type."""


class EnvelopeError(HookbusError):
    """Bytes received from the bus are not a valid event envelope.

    ``drop`` is the reason a receiver counts it under (``malformed``,
    ``oversize``, ``depth``: the labels of ``hookbus_events_dropped_total``).
    """

    def __init__(self, subject: str, reason: str, drop: str = "malformed") -> None:
        self.subject = subject
        self.reason = reason
        self.drop = drop
        what = "malformed" if drop == "malformed" else "refused"
        super().__init__(f"{what} event on {subject!r}: {reason}")


class PayloadRefError(_AboutError, message="payload of the event on {subject!r}: {reason}"):
    """The whole payload of a claimed event cannot be had: its reference is refused or its object is not right.

    Receivers check a reference as if the emitter were hostile: the bucket
    name, the size against their cap, and the object's size and SHA-256
    against the reference. ``subject`` is the event's subject.
    """

    subject: str


class MiddlewareError(HookbusError):
    """The middleware (handlers, registry, trust) could not do what was asked."""


class AskRefused(_AboutError, MiddlewareError, message="ask {ask_id}: {reason}"):
    """An answer the asks store refused: no such ask, expired, another payload hash, or already answered."""

    ask_id: str


class StageError(_AboutError, MiddlewareError, ValueError, message="invalid stage {stage!r}: {reason}"):
    """A stage name does not follow the stage rules."""

    stage: object


class DeclarationError(_AboutError, MiddlewareError, ValueError, message="handler {handler!r}: {reason}"):
    """A handler declaration (name, timeout, before/after, matcher) is invalid."""

    handler: str


class RecordError(_AboutError, MiddlewareError, ValueError, message="handler record {record!r}: {reason}"):
    """A stored handler record is invalid (names the record and field), or the store cannot be used."""

    record: str


class DecisionError(_AboutError, MiddlewareError, message="invalid decision from {where}: {reason}"):
    """A handler's answer is not a valid decision."""

    where: str


class RegistryError(MiddlewareError):
    """The handler registry or trust store (JetStream KV) cannot be used."""


class TransportError(HookbusError):
    """The transport could not carry a message, or a request got no answer it could use."""


class NotSent(TransportError):
    """The connection did not take a message; ``reason`` is the drop label it is counted under.

    ``closed``: the connection is closed or draining; ``disconnected``: it is
    down and its outgoing buffer is full, or it failed otherwise; ``oversize``:
    over the server's ``max_payload``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"message not sent ({reason}): {detail}")


class JournalError(HookbusError):
    """Bytes on a journal subject are not a valid entry; ``reason`` is the metric label of why."""

    reason: str = "invalid"


class BrokenChain(_AboutError, MiddlewareError, message="chain of {stage!r} is broken: {reason}"):
    """The stage's declarations cannot be ordered."""

    stage: str


class ForeignAnnouncement(MiddlewareError, ValueError):
    """A registry entry that claims another module's name: an impersonation attempt, not a typo."""


class TooManyHandlers(MiddlewareError, ValueError):
    """An announcement over the handler cap (docs/protocol.md), or taking its module over it: refused whole."""


class NoResponders(TransportError):
    """Nobody subscribes to the subject: the module is not running."""


class RequestTimeout(TransportError):
    """No reply within the timeout."""


class Aborted(TransportError):
    """The requester was closed while the request was pending."""
