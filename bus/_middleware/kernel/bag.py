"""The per-turn bag: named values handlers pass to the handlers after them, kept by the kernel per agent run.

A handler declares ``outputs`` (bag keys it writes) and ``inputs`` (keys it
reads, each ``required`` or with a ``default``). The kernel sends a request the
values its handlers read (``ctx.inputs``), keeps what they wrote (a reply's
``outputs``, only their declared keys, bounded in size), and clears a
bag when its next ``user.message`` is intercepted: a bag lives for one user
message. A bag belongs to one agent run, as agent_os scopes it by process:
the caller's ``process`` and session together (``scope="process"``, the
default), so two processes of one kernel (the agent-hook relay's agents)
never share one; ``scope="session"`` keys it by the session alone, shared by
every process that names the session. A handler whose required input is missing is not
called; it reads as a fault of its fail mode (outcome ``skipped``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

import orjson

from bus._core.declaration import Declaration
from bus._core.middleware_schema import ReactionMsg
from bus._core.stages import Stage

#: Sessions whose bag is kept (the least recently used goes first).
MAX_SESSIONS: Final = 1024
#: Keys one session's bag holds; later new keys are refused (logged by the caller's journal as nothing written).
MAX_KEYS: Final = 256
#: Encoded bytes of one value: a bag carries labels and queries, not documents.
MAX_VALUE_BYTES: Final = 16 * 1024
#: The stage whose call starts a new bag for its session.
TURN_START: Final = Stage.USER_MESSAGE.value


class _Linked(Protocol):
    @property
    def decl(self) -> Declaration: ...


#: What a bag belongs to: an agent run (a process and its session), or a session whoever calls.
SCOPES: Final = ("process", "session")


class Bags:
    """Every agent run's bag (``None`` and ``""`` share one: calls that name no session, or no process)."""

    def __init__(self, scope: str = "process") -> None:
        if scope not in SCOPES:
            raise ValueError(f"bag scope {scope!r}: one of {', '.join(SCOPES)}")
        self.scope = scope
        self._bags: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def _key(self, session: str | None, process: str | None) -> str:
        return session or "" if self.scope == "session" else f"{process or ''}\x1f{session or ''}"

    def of(self, session: str | None, process: str | None = None) -> dict[str, Any]:
        key = self._key(session, process)
        bag = self._bags.get(key)
        if bag is None:
            bag = self._bags[key] = {}
            if len(self._bags) > MAX_SESSIONS:
                self._bags.popitem(last=False)
        else:
            self._bags.move_to_end(key)
        return bag

    def clear(self, session: str | None, process: str | None = None) -> None:
        """A new user message: the run's bag starts empty."""
        self._bags.pop(self._key(session, process), None)


def missing(decl: Declaration, bag: dict[str, Any]) -> str | None:
    """The first required input of ``decl`` the bag lacks, or None."""
    for item in decl.inputs:
        if item.required and item.key not in bag:
            return item.key
    return None


def inputs_for(links: Sequence[_Linked], bag: dict[str, Any]) -> dict[str, Any] | None:
    """The bag values a request's handlers read (None when none reads any)."""
    keys = {item.key for link in links for item in link.decl.inputs}
    if not keys:
        return None
    return {key: bag[key] for key in sorted(keys) if key in bag}


def take_outputs(links: Sequence[_Linked], reactions: object, bag: dict[str, Any]) -> None:
    """Keep what each handler of a request wrote: its declared keys only, each value within the bounds."""
    if not isinstance(reactions, list):
        return
    declared = {name: link.decl.outputs for link in links for name in (link.decl.qualname, link.decl.name)}
    for item in reactions:
        if not isinstance(item, ReactionMsg) or not isinstance(item.outputs, dict) or item.outcome != "ok":
            continue
        allowed = declared.get(item.handler) or ()
        for key, value in item.outputs.items():
            if key in allowed and (key in bag or len(bag) < MAX_KEYS) and _fits(value):
                bag[key] = value


def _fits(value: Any) -> bool:
    try:
        return len(orjson.dumps(value)) <= MAX_VALUE_BYTES
    except (TypeError, orjson.JSONEncodeError):
        return False


def ports(decls: Iterable[Declaration]) -> list[dict[str, Any]]:
    """Per bag key, sorted: its producers and its consumers (``hookbus bag``, ``GET /api/bag``, ``/v1/hooks/bag``)."""
    keys: dict[str, dict[str, Any]] = {}

    def entry(key: str) -> dict[str, Any]:
        return keys.setdefault(key, {"key": key, "producers": [], "consumers": []})

    for decl in sorted(decls, key=lambda d: d.qualname):
        for key in decl.outputs:
            entry(key)["producers"].append({"handler": decl.qualname, "stage": decl.stage})
        for item in decl.inputs:
            consumer = {"handler": decl.qualname, "stage": decl.stage, "port": item.name, "required": item.required}
            consumer["default"] = item.default
            entry(item.key)["consumers"].append(consumer)
    return [keys[key] for key in sorted(keys)]
