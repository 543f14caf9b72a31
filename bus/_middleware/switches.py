"""The operator's switches of a handler: enabled or not, global or granted to some agents.

Kept in the trust bucket beside the approvals, under ``switch.<module>.<handler>``
(three tokens: never an approval's ``<module>.<handler>`` key), so every
kernel that follows trust follows the switches within a heartbeat, and the
roles that may approve are the roles that may switch. A handler without a
record is enabled and global. Switches are not part of a handler's identity:
disabling or granting needs no re-approval and survives one.
"""

from __future__ import annotations

import getpass
import socket
import time
from dataclasses import dataclass
from typing import Final

import msgspec

from bus._core.errors import MiddlewareError
from bus._core.schema import decode
from bus._core.subjects import TOKEN_RE, handler_key, handler_of_key
from bus._middleware.schema import SwitchRecordMsg
from bus._transport.kv import Bucket

#: The key prefix of a switch record in the trust bucket.
SWITCH_PREFIX: Final = "switch."


@dataclass(frozen=True, slots=True)
class Switches:
    """One handler's switches: ``agents`` None means every agent (global); ``shadow``: decide, never apply."""

    enabled: bool = True
    agents: frozenset[str] | None = None
    shadow: bool = False

    def applies_to(self, agent: object) -> bool:
        """Whether a call by ``agent`` (the call's ctx ``agent``) reaches the handler."""
        return self.agents is None or (isinstance(agent, str) and agent in self.agents)


#: The switches of a handler nobody switched.
DEFAULT: Final = Switches()


def switch_key(qualname: str) -> str:
    """``switch.<module>.<handler>``; raises MiddlewareError for a name that is not module.handler."""
    return handler_key(SWITCH_PREFIX, qualname)


def switched_handler(key: str) -> str | None:
    """The ``module.handler`` a trust bucket key switches, or None if it is not a switch key."""
    return handler_of_key(SWITCH_PREFIX, key)


def parse_switches(data: bytes | None) -> Switches:
    """A switch record as the kernel reads it; raises ValueError naming what is wrong."""
    if not data:
        return DEFAULT
    msg = decode(data, SwitchRecordMsg, "switch record", ValueError)
    return Switches(msg.enabled, frozenset(msg.agents) if msg.agents is not None else None, msg.shadow)


async def read_switches(kv: Bucket, qualname: str) -> SwitchRecordMsg:
    entry = await kv.get(switch_key(qualname))
    if entry is None or not entry.value:
        return SwitchRecordMsg()
    try:
        return decode(entry.value, SwitchRecordMsg, "switch record", ValueError)
    except ValueError:
        return SwitchRecordMsg()  # an unreadable record is overwritten by the operator's next switch


async def set_enabled(kv: Bucket, qualname: str, enabled: bool) -> SwitchRecordMsg:
    """Enable or disable a handler (its grants are kept); return the record written."""
    record = await read_switches(kv, qualname)
    return await _write(kv, qualname, SwitchRecordMsg(enabled=enabled, agents=record.agents, shadow=record.shadow))


async def set_shadow(kv: Bucket, qualname: str, shadow: bool) -> SwitchRecordMsg:
    """Put a handler in shadow (its decisions journaled as ``would_*``, never applied) or back; return the record."""
    record = await read_switches(kv, qualname)
    return await _write(kv, qualname, SwitchRecordMsg(enabled=record.enabled, agents=record.agents, shadow=shadow))


async def grant(kv: Bucket, qualname: str, agent: str | None) -> SwitchRecordMsg:
    """Grant a handler to ``agent`` (it stops being global), or to every agent (``None``: global again)."""
    record = await read_switches(kv, qualname)
    if agent is None:
        agents = None
    else:
        _check_agent(agent)
        agents = sorted({*(record.agents or ()), agent})
    return await _write(kv, qualname, SwitchRecordMsg(enabled=record.enabled, agents=agents, shadow=record.shadow))


async def revoke(kv: Bucket, qualname: str, agent: str) -> SwitchRecordMsg:
    """Take a handler from ``agent``; its last grant revoked, it applies to no agent (never global again by itself)."""
    _check_agent(agent)
    record = await read_switches(kv, qualname)
    if record.agents is None:
        raise MiddlewareError(
            f"{qualname} is global (it applies to every agent): grant it to the agents it should serve "
            "(hookbus grant NAME --agent A), or disable it"
        )
    if agent not in record.agents:
        granted = ", ".join(record.agents) or "no agent"
        raise MiddlewareError(f"{qualname} is not granted to {agent} (granted to {granted})")
    agents = sorted(set(record.agents) - {agent})
    return await _write(kv, qualname, SwitchRecordMsg(enabled=record.enabled, agents=agents, shadow=record.shadow))


def _check_agent(agent: str) -> None:
    if not TOKEN_RE.fullmatch(agent):
        raise MiddlewareError(f"agent name {agent!r} must match [A-Za-z0-9_-]+")


async def _write(kv: Bucket, qualname: str, record: SwitchRecordMsg) -> SwitchRecordMsg:
    record.by = f"{getpass.getuser()}@{socket.gethostname()}"
    record.at = time.time()
    await kv.put(switch_key(qualname), msgspec.json.encode(record))
    return record


def describe(record: SwitchRecordMsg) -> str:
    """``enabled, global`` / ``disabled, granted to eva, bob``: how the CLI and the journal say it."""
    state = ("enabled" if record.enabled else "disabled") + (", shadow" if record.shadow else "")
    if record.agents is None:
        return f"{state}, global"
    return f"{state}, granted to {', '.join(record.agents) or 'no agent'}"
