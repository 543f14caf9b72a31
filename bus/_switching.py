"""Switching handlers as an operator, journaled: enable, disable, grant to an agent, revoke.

``hookbus enable/disable/grant/revoke`` call these, and so can Python code
holding a Bus with operator rights. The switches live in the trust bucket
(:mod:`bus._middleware.switches`); every kernel applies them from its next call
after its watch delivers them (within a heartbeat). Each change is journaled
(kind ``middleware``, decision ``enabled``/``disabled``/``granted``/``revoked``/
``shadowed``/``unshadowed``, the actor in the cause).
"""

from __future__ import annotations

import getpass
import socket
from typing import Final

from bus._client import Bus
from bus._core.errors import MiddlewareError
from bus._core.schema import decode
from bus._core.stages import phase
from bus._journal.entries import JournalEntry, publish_entry
from bus._middleware import switches
from bus._middleware.registry import TRUST_BUCKET, open_bucket
from bus._middleware.schema import SwitchRecordMsg, TrustRecord
from bus._middleware.switches import describe
from bus._transport.kv import Bucket

#: The journal decisions these write.
SWITCH_DECISIONS: Final = ("enabled", "disabled", "granted", "revoked", "shadowed", "unshadowed")


def _actor() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


async def enable_handler(bus: Bus, name: str, *, actor: str | None = None) -> SwitchRecordMsg:
    """Let ``name`` (``module.handler``) run again."""
    return await _switch(bus, name, "enabled", None, actor)


async def disable_handler(bus: Bus, name: str, *, actor: str | None = None) -> SwitchRecordMsg:
    """Stop calling ``name`` without stopping its module; a disabled fail-closed guard cancels nothing."""
    return await _switch(bus, name, "disabled", None, actor)


async def shadow_handler(bus: Bus, name: str, on: bool = True, *, actor: str | None = None) -> SwitchRecordMsg:
    """Put ``name`` in shadow (``on``): it runs on live traffic, its decisions journaled as ``would_cancel`` /
    ``would_patch`` / ``would_ask`` with the payload's hash and never applied; ``on=False`` applies them again."""
    return await _switch(bus, name, "shadowed" if on else "unshadowed", None, actor)


async def grant_handler(bus: Bus, name: str, agent: str | None, *, actor: str | None = None) -> SwitchRecordMsg:
    """Apply ``name`` to ``agent`` too (it then applies only to its granted agents); ``None``: to every agent."""
    return await _switch(bus, name, "granted", agent, actor)


async def revoke_handler(bus: Bus, name: str, agent: str, *, actor: str | None = None) -> SwitchRecordMsg:
    """Stop applying ``name`` to ``agent`` (refused for a global handler: grant it to its agents first)."""
    return await _switch(bus, name, "revoked", agent, actor)


async def _switch(bus: Bus, name: str, action: str, agent: str | None, actor: str | None) -> SwitchRecordMsg:
    switches.switch_key(name)  # module.handler, or a clear error
    kv = await open_bucket(bus.port, TRUST_BUCKET)
    stage = await _stage_of(bus, kv, name)
    if action in ("enabled", "disabled"):
        record = await switches.set_enabled(kv, name, action == "enabled")
    elif action in ("shadowed", "unshadowed"):
        record = await switches.set_shadow(kv, name, action == "shadowed")
    elif action == "granted":
        record = await switches.grant(kv, name, agent)
    else:
        assert agent is not None
        record = await switches.revoke(kv, name, agent)
    who = actor or _actor()
    what = f"{action} by {who}" + (f" for agent {agent}" if agent else "") + f": now {describe(record)}"
    entry = JournalEntry("middleware", stage, phase(stage), name, action, what)
    entry.agent = agent
    await publish_entry(bus.port, entry)
    await bus.flush()
    return record


async def _stage_of(bus: Bus, kv: Bucket, name: str) -> str:
    """The stage of a handler the bus knows (live or approved); MiddlewareError naming the known ones otherwise."""
    view = await bus.middleware.start()
    live = view.declarations()
    if name in live:
        return live[name][0].stage
    rule = view.rules.find(name)
    if rule is not None:
        return rule.decls[0].stage
    entry = await kv.get(name)
    if entry is not None and entry.value:
        try:
            stage = decode(entry.value, TrustRecord, "trust value", ValueError).declaration.get("stage")
        except ValueError:
            stage = None
        if isinstance(stage, str):
            return stage
    known = sorted({*live, *view.approved})
    raise MiddlewareError(
        f"no handler named {name!r} is declared or approved on this bus (known: {', '.join(known) or 'none'})"
    )
