"""Where a connection's hookbus state lives: this server's JetStream, or the hub's across a leaf node link.

Every JetStream-backed feature (the write-once asks buckets, the budgets'
counter buckets, the claim check's ``hookbus_payloads`` stream, the journal
and history streams, KV buckets with no local mirror) opens its JetStream
context and its write subjects through :func:`home_of`, the one place that
reads ``HOOKBUS_KV_DOMAIN``. Set on a leaf node's processes, it names the
hub's domain: API requests (stream info and create, direct gets, consumers)
then go to ``$JS.<hub>.API``, and writes to ``$KV.`` subjects, which
nats-server does not carry between two domains, go to
``$JS.<hub>.API.$KV.<bucket>.<key>`` (ADR-8's layout for mirrored buckets).
Nothing is ever created in the leaf's own domain as a second copy nobody on
the hub would see. Other subjects (the journal's, the claim check's ``$O.``
ones) cross the link as they are.

The answer is asked of the server once per connection (its account info
names its domain) and kept; a failed look-up is not kept, so the next call asks again.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any

import nats.errors as nats_errors
import nats.js.errors as js_errors

from bus._core.subjects import JS_API, direct_get_subject, js_domain_api
from bus._transport.kv_mirror import kv_domain

_FAILURES = (nats_errors.Error, js_errors.Error, TimeoutError)
#: Each connection's answer: the domain HOOKBUS_KV_DOMAIN named when it was asked, and the home found then.
_KNOWN: weakref.WeakKeyDictionary[Any, tuple[str, str | None]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Home:
    """The JetStream domain holding hookbus's state as seen from one connection: None for this server's own."""

    domain: str | None = None

    @property
    def cross_domain(self) -> bool:
        return self.domain is not None

    @property
    def api(self) -> str:
        """The JetStream API prefix reaching the state: ``$JS.API``, or ``$JS.<hub>.API`` from a leaf."""
        return JS_API if self.domain is None else js_domain_api(self.domain)

    def jetstream(self, nc: Any, **options: Any) -> Any:
        """nats-py's JetStream context for the state (``options``: its timeout, say)."""
        return nc.jetstream(domain=self.domain, **options) if self.domain else nc.jetstream(**options)

    def kv_write(self, subject: str) -> str:
        """Where a write to a ``$KV.`` subject goes: the subject itself, or through the hub domain's API prefix."""
        return subject if self.domain is None else f"{self.api}.{subject}"

    def direct_get(self, stream: str) -> str:
        """The subject of a (batched) direct get on ``stream`` where it lives."""
        return direct_get_subject(stream, self.api)


HERE = Home()


async def home_of(nc: Any) -> Home:
    """Where ``nc``'s hookbus state lives: the hub's domain when ``HOOKBUS_KV_DOMAIN`` names one that is not
    this server's, else this server's JetStream."""
    hub = kv_domain()
    if hub is None:
        return HERE
    try:
        known = _KNOWN.get(nc)
    except TypeError:  # a client that cannot be weakly referenced: asked each time
        known = None
    if known is not None and known[0] == hub:
        return Home(known[1])
    try:
        info = await nc.jetstream().account_info()
    except _FAILURES:
        return HERE  # JetStream not answering here (yet): the caller's own request will say so
    here = getattr(info, "domain", None) or None
    home = Home(hub if here is not None and here != hub else None)
    with contextlib.suppress(TypeError):
        _KNOWN[nc] = (hub, home.domain)
    return home
