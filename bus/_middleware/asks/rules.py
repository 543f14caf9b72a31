"""Standing rules: one operator's ``allow`` remembered for that session or that agent (``--remember``).

A rule names what it allows exactly as the ask it came from does: the asking
user, the handler and its identity, the stage and the value of the stage's
matcher field (the tool's name), and either the session or the agent. A
kernel about to hold an ask looks up both of the rules that could answer it
(two direct gets, sent together) and, if one stands, goes on without holding:
journaled as allowed by that rule.

The bucket ``hookbus_ask_rules`` is write-once and keeps its keys for good:
``rule.<user>.<id>`` (the rule) and ``revoked.<user>.<id>`` (its revocation).
Only operators write it; each agent reads only its own user's keys. A rule id
hashes what the rule matches, so the same answer remembered twice is one
rule, and a revoked rule stays revoked (the revocation cannot be erased).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any, Final, Literal

import msgspec
import orjson

from bus._core.errors import AskRefused, HookbusError
from bus._core.stages import match_field
from bus._core.subjects import ASK_RULES_BUCKET
from bus._journal.entries import JournalEntry, publish_entry
from bus._middleware.asks.records import AskMsg
from bus._transport.once import KeyMirror
from bus._transport.port import Port

log = logging.getLogger("hookbus.middleware")

#: Seconds between attempts at mirroring a user's rules (a refused or lost mirror falls back to direct gets).
MIRROR_RETRY_S: Final = 5.0

Scope = Literal["session", "agent"]
SCOPES: Final = ("session", "agent")


class RuleMsg(msgspec.Struct, kw_only=True):
    """One standing rule, under ``rule.<user>.<id>``."""

    id: str
    user: str
    scope: Scope
    scoped_to: str  # the session id or the agent name
    stage: str
    handler: str
    identity: str | None = None
    field: str  # the stage's matcher field
    value: Any = None  # its value in the remembered call
    by: str
    made_at: float
    from_ask: str

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


class RevokedMsg(msgspec.Struct, kw_only=True):
    id: str
    by: str
    revoked_at: float


def rule_id(user: str, scope: str, scoped_to: str, stage: str, handler: str, identity: str | None, value: Any) -> str:
    """16 hex digits naming what a rule matches (so the same answer remembered twice is the same rule)."""
    text = orjson.dumps([user, scope, scoped_to, stage, handler, identity, value], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(text).hexdigest()[:16]


def rule_key(user: str, rid: str) -> str:
    return f"rule.{user}.{rid}"


def revoked_key(user: str, rid: str) -> str:
    return f"revoked.{user}.{rid}"


def _scoped_to(scope: str, session: str | None, agent: str | None) -> str | None:
    return session if scope == "session" else agent


def _decode_rule(data: bytes | None) -> RuleMsg | None:
    if data is None:
        return None
    try:
        return msgspec.json.decode(data, type=RuleMsg)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


class AskRules:
    """The rules bucket seen through one connection: a kernel's lookup, an operator's remember/list/revoke."""

    def __init__(self, port: Port) -> None:
        self._port = port
        self._bucket = port.once_bucket(ASK_RULES_BUCKET, 0)
        self._mirror: KeyMirror | None = None
        self._mirror_at = 0.0  # monotonic time the last mirror was started

    @property
    def mirror_live(self) -> bool:
        """Whether this connection's rules are read from memory now (else key by key)."""
        return self._mirror is not None and self._mirror.live

    async def _mirrored(self, user: str) -> KeyMirror | None:
        """This user's rules held in memory, if that mirror is live (else None: read the bucket, and
        start a mirror, at most every MIRROR_RETRY_S)."""
        mirror = self._mirror
        if mirror is not None and mirror.live:
            return mirror
        if (mirror is None or mirror.broken) and time.monotonic() - self._mirror_at >= MIRROR_RETRY_S:
            self._mirror_at = time.monotonic()
            if mirror is not None:
                await mirror.stop()
            self._mirror = self._bucket.mirror(f"*.{user}.>")
            try:
                await self._mirror.start()
            except HookbusError as exc:
                log.info("standing rules are read key by key: %s", exc)
        return None

    async def matching(self, ask: AskMsg) -> RuleMsg | None:
        """The standing rule that answers ``ask`` (its session's, else its agent's), None if none stands."""
        value = ask.payload.get(match_field(ask.stage))
        candidates = []
        for scope in SCOPES:
            scoped_to = _scoped_to(scope, ask.session, ask.agent)
            if scoped_to:
                rid = rule_id(ask.user, scope, scoped_to, ask.stage, ask.handler, ask.identity, value)
                candidates.append(rid)
        if not candidates:
            return None
        keys = [key for rid in candidates for key in (rule_key(ask.user, rid), revoked_key(ask.user, rid))]
        mirror = await self._mirrored(ask.user)
        if mirror is not None:  # kept current by the server: no round trip
            found = [mirror.values.get(key) for key in keys]
        else:
            found = await asyncio.gather(*(self._bucket.get(key) for key in keys))
        for n, rid in enumerate(candidates):
            rule, revoked = _decode_rule(found[2 * n]), found[2 * n + 1]
            if rule is not None and revoked is None and _answers(rule, ask, rid, value):
                return rule
        return None

    async def remember(self, ask: AskMsg, scope: str, by: str) -> RuleMsg:
        """Make the rule that allows the asks like ``ask`` of its session or agent; AskRefused if it cannot."""
        scoped_to = _scoped_to(scope, ask.session, ask.agent)
        if scope not in SCOPES or not scoped_to:
            raise AskRefused(ask.id, f"the ask names no {scope}: nothing to remember it for")
        value = ask.payload.get(match_field(ask.stage))
        rid = rule_id(ask.user, scope, scoped_to, ask.stage, ask.handler, ask.identity, value)
        if await self._bucket.get(revoked_key(ask.user, rid)) is not None:
            raise AskRefused(ask.id, f"rule {rid} was revoked, and a revoked rule stays revoked")
        rule = RuleMsg(
            id=rid,
            user=ask.user,
            scope=scope,  # type: ignore[arg-type]  # checked above
            scoped_to=scoped_to,
            stage=ask.stage,
            handler=ask.handler,
            identity=ask.identity,
            field=match_field(ask.stage),
            value=value,
            by=by,
            made_at=time.time(),
            from_ask=ask.id,
        )
        if await self._bucket.create(rule_key(ask.user, rid), msgspec.json.encode(rule), None):
            await self._journal(rule, "remembered", f"allow {rule.handler} for {scope} {scoped_to}, by {by}")
            return rule
        return _decode_rule(await self._bucket.get(rule_key(ask.user, rid))) or rule

    async def rules(self) -> list[RuleMsg]:
        """Every rule standing now (not revoked), oldest first."""
        keys = set(await self._bucket.keys())
        out = []
        for key in keys:
            kind, _, rest = key.partition(".")
            if kind != "rule" or f"revoked.{rest}" in keys:
                continue
            rule = _decode_rule(await self._bucket.get(key))
            if rule is not None and key == rule_key(rule.user, rule.id):
                out.append(rule)
        return sorted(out, key=lambda rule: rule.made_at)

    async def revoke(self, rid: str, by: str) -> RuleMsg:
        """Revoke the rule ``rid`` for good; AskRefused if there is no such rule standing."""
        for rule in await self.rules():
            if rule.id == rid:
                revoked = RevokedMsg(id=rid, by=by, revoked_at=time.time())
                await self._bucket.create(revoked_key(rule.user, rid), msgspec.json.encode(revoked), None)
                await self._journal(rule, "revoked", f"rule {rid} revoked by {by}")
                return rule
        raise AskRefused(rid, "no such rule standing")

    async def _journal(self, rule: RuleMsg, decision: str, cause: str) -> None:
        entry = JournalEntry("middleware", rule.stage, "ask-rule", rule.handler, decision, cause=cause)
        if rule.scope == "session":
            entry.session = rule.scoped_to
        else:
            entry.agent = rule.scoped_to
        await publish_entry(self._port, entry)


def _answers(rule: RuleMsg, ask: AskMsg, rid: str, value: Any) -> bool:
    """The rule read back names what its key says (a rule is trusted for its content, not its key alone)."""
    return (
        rule.id == rid
        and rule.user == ask.user
        and rule.stage == ask.stage
        and rule.handler == ask.handler
        and rule.identity == ask.identity
        and rule.value == value
        and rule.scoped_to == _scoped_to(rule.scope, ask.session, ask.agent)
    )
