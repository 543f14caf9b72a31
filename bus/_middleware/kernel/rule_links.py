"""Rules in the live view: each rule's links in its stages' chains, by the same trust as modules' handlers.

A local rule (``Bus(rules=[path])``: this agent's own configuration) runs as
managed. A rule from the ``hookbus_rules`` bucket runs only as approved: the
trust store must hold its identity (the hash of its normalised text). A new
rule waits for ``hookbus approve``; a changed one waits while the approved
version keeps running (kept in memory, or compiled again from the trust
record's text); an operator's reject or disable applies as to any handler.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping

import msgspec

from bus._core.errors import RegistryError
from bus._middleware.kernel.chain import ChainParts
from bus._middleware.kernel.link import Link
from bus._middleware.rules.book import RuleBook
from bus._middleware.rules.compile import Rule, RuleDeclaration
from bus._middleware.switches import DEFAULT as DEFAULT_SWITCHES
from bus._middleware.switches import Switches
from bus._middleware.trust import TrustState, trust_key, trust_record
from bus._transport.kv import Bucket

log = logging.getLogger("hookbus.middleware")

Parts = Callable[[str], ChainParts]


class _Approved(msgspec.Struct):
    declaration: dict[str, object]


def approved_text(data: bytes | None) -> str | None:
    """The rule text a trust record keeps (its declaration's ``code``), or None."""
    if not data:
        return None
    try:
        code = msgspec.json.decode(data, type=_Approved).declaration.get("code")
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return code if isinstance(code, str) else None


class RulePlacer:
    """Puts the rules of a book into a view's chain parts (called on every rebuild)."""

    def __init__(self, book: RuleBook, *, trust_new: bool, aliases: Mapping[str, str]) -> None:
        self.book = book
        self.trust_new = trust_new
        self.aliases = aliases
        self.trust_raw: dict[str, bytes] = {}
        self.trust_kv: Bucket | None = None
        self.new: list[RuleDeclaration] = []  # never-approved rules trust_new approves (the view spawns it)

    def place(
        self,
        parts: Parts,
        approved: Mapping[str, str],
        rejected: Mapping[str, frozenset[str] | set[str]],
        switches: Mapping[str, Switches],
    ) -> set[str]:
        """Place every rule; return their qualified names (a module's handler of the same name is left out)."""
        names: set[str] = set()
        for rule in self.book.local:
            names.add(rule.qualname)
            self._add(parts, rule, TrustState.MANAGED, switches, runs=True)
        for rule in self.book.fleet():
            if rule.qualname in names:
                continue  # this agent's own file wins over the fleet's rule of the same name
            names.add(rule.qualname)
            self._place_fleet(parts, rule, approved.get(rule.qualname), rejected, switches)
        return names

    def _place_fleet(
        self,
        parts: Parts,
        rule: Rule,
        approved: str | None,
        rejected: Mapping[str, frozenset[str] | set[str]],
        switches: Mapping[str, Switches],
    ) -> None:
        if approved == rule.identity:
            self._add(parts, rule, TrustState.TRUSTED, switches, runs=True)
            return
        if approved is not None:
            old = self.book.version(rule.qualname, approved, approved_text(self.trust_raw.get(rule.qualname)))
            if old is not None:
                self._add(parts, old, TrustState.TRUSTED, switches, runs=True)
        if rule.identity in rejected.get(rule.qualname, ()):
            for decl in rule.decls:
                parts(decl.stage).rejected.append(self._link(rule, decl, TrustState.REJECTED, switches))
            return
        state = TrustState.UNTRUSTED if approved is None else TrustState.MODIFIED
        if state is TrustState.UNTRUSTED and self.trust_new:
            self.new.append(rule.decls[0])
        for decl in rule.decls:
            parts(decl.stage).waiting.append(self._link(rule, decl, state, switches))

    def _add(
        self, parts: Parts, rule: Rule, state: TrustState, switches: Mapping[str, Switches], *, runs: bool
    ) -> None:
        enabled = rule.enabled and switches.get(rule.qualname, DEFAULT_SWITCHES).enabled
        for decl in rule.decls:
            link = self._link(rule, decl, state, switches)
            (parts(decl.stage).runs if enabled and runs else parts(decl.stage).disabled).append(link)

    def _link(self, rule: Rule, decl: RuleDeclaration, state: TrustState, switches: Mapping[str, Switches]) -> Link:
        match = frozenset(self.aliases.get(name, name) for name in decl.match) if decl.match else None
        switched = switches.get(decl.qualname, DEFAULT_SWITCHES)
        agents = switched.agents
        scoped = agents is not None or bool(decl.when)
        shadow = rule.shadow or switched.shadow
        return Link(
            decl, "", False, state, match, rule.identity, agents=agents, scoped=scoped, rule=rule, shadow=shadow
        )

    def find(self, qualname: str) -> Rule | None:
        """The rule named ``qualname`` this kernel knows (its own files first, then the fleet's), or None."""
        return next((rule for rule in (*self.book.local, *self.book.fleet()) if rule.qualname == qualname), None)

    async def approve_new(self, decl: RuleDeclaration) -> None:
        """trust_new: approve a never-seen rule (create fails if someone approved meanwhile)."""
        if self.trust_kv is None:
            return
        with contextlib.suppress(RegistryError):
            if await self.trust_kv.create(trust_key(decl), trust_record(decl, "trust-new")):
                log.warning("trust_new: approved new rule %s on first sight", decl.qualname)
