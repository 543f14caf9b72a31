"""hooks.json: read it, hold it, write it back. The rules of hooks that need code.

The format is PRX's::

    {"enabled": true, "timeout_ms": 5000,
     "hooks": {"<event>": [{"command": ..., "args": [...], "env": {...}, "cwd": ...,
                            "timeout_ms": 5000, "stdin_json": true}]}}

Its shapes are declared in :mod:`subscribers.shell_hooks._config_schema` (``ShellHooksFile``,
``ShellHook``, ``ShellAction``) and converted by msgspec. What stays here:
reading a key (PRX's normalisation, then the subject grammar, in
:func:`read_key`), the defaults (``null`` or absent: the file's ``timeout_ms``,
else 30 s), the security refusals, ids, and writing back each entry in the
shape it was read.

Two kinds of problem, told apart on purpose:

- a structural one (bad JSON, wrong type, unknown field, bad key) makes the
  whole file invalid: :class:`~subscribers.shell_hooks._errors.HookConfigError` naming file,
  key and index, and field; the worker keeps its last good configuration;
- a security one (shell metacharacters, NUL bytes, a climbing ``cwd``) refuses
  that entry only: it is loaded with ``refused`` set, logged, counted, never run.

The HTTP API rejects both kinds (400), through the same functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar

import msgspec
import orjson

from bus._core.catalog import warn_misspelt
from bus._core.clock import now_timestamp
from bus._core.errors import SubjectError
from bus._core.json_types import json_type
from bus._core.schema import field_problem
from bus._core.subjects import PRX_EVENTS, matches, normalise_pattern
from bus._sandbox.config_schema import Isolation, IsolationField
from bus._sandbox.security import command_problem, cwd_problem, is_allowed_env, nul_problem
from subscribers.shell_hooks._config_schema import (
    HOOK_TIMEOUT_MS,
    ShellAction,
    ShellHook,
    ShellHookBody,
    ShellHooksFile,
)
from subscribers.shell_hooks._errors import HookConfigError, HookNotFound

DEFAULT_TIMEOUT_MS: Final = HOOK_TIMEOUT_MS
#: What PRX's key normalisation changes: ASCII upper case, and ``-`` for ``_``.
_PRX_FOLD: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ-", "abcdefghijklmnopqrstuvwxyz_")

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class HookAction:
    """What to run: the PRX action fields, defaults applied."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    stdin_json: bool = False
    #: The action's own ``isolation`` as written (None: the file's default applies; see :func:`isolation_of`).
    isolation: IsolationField = None

    def to_json(self) -> dict[str, Any]:
        """The action as the PRX document shows it (env, cwd and isolation only when set)."""
        out: dict[str, Any] = {"command": self.command, "args": list(self.args)}
        if self.env:
            out["env"] = dict(self.env)
        if self.cwd is not None:
            out["cwd"] = self.cwd
        out["timeout_ms"] = self.timeout_ms
        out["stdin_json"] = self.stdin_json
        if self.isolation is not None:
            out["isolation"] = msgspec.to_builtins(self.isolation)
        return out

    def ignored_env(self) -> list[str]:
        """Keys of ``env`` that the sanitised environment will not let through."""
        return sorted(key for key in self.env if not is_allowed_env(key))


@dataclass(frozen=True, slots=True)
class HookEntry:
    """One hook: an event key, an action, the management fields, and the object it was read from."""

    id: str
    event: str
    pattern: str
    action: HookAction
    enabled: bool = True
    created_at: str | None = None
    updated_at: str | None = None
    #: Why the security rules refuse this entry (never run), or None.
    refused: str | None = None
    #: The key as written in the file (``Tool-Call`` for the event ``tool_call``): where it is written back.
    key: str = ""
    #: The entry's object as written: what is written back, so that its shape is kept.
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_api(self) -> dict[str, Any]:
        """The hook object of the HTTP API; ``command`` and ``timeout_ms`` flat too, for PRX's console."""
        return {
            "id": self.id,
            "event": self.event,
            "action": self.action.to_json(),
            "enabled": self.enabled,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "command": self.action.command,
            "timeout_ms": self.action.timeout_ms,
        }

    def hookbus_fields(self) -> dict[str, Any]:
        """The entry in hookbus's full shape: the action fields plus the management ones."""
        out: dict[str, Any] = {"id": self.id, **self.action.to_json(), "enabled": self.enabled}
        if self.created_at is not None:
            out["created_at"] = self.created_at
        if self.updated_at is not None:
            out["updated_at"] = self.updated_at
        return out


@dataclass(frozen=True, slots=True)
class HooksConfig:
    """A whole hooks.json, validated."""

    entries: tuple[HookEntry, ...] = ()
    #: The file's top-level fields besides ``hooks`` (PRX's ``enabled``, ``timeout_ms``), as written.
    top: Mapping[str, Any] = field(default_factory=dict)
    #: What the loader logs once per version (keys read differently from how they are written).
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def enabled(self) -> bool:
        """PRX's switch for the whole file (absent or null: on)."""
        return self.top.get("enabled") is not False

    @property
    def timeout_ms(self) -> int:
        """The timeout of actions that give none."""
        return int(self.top.get("timeout_ms") or DEFAULT_TIMEOUT_MS)

    @property
    def isolation(self) -> object:
        """The file's ``isolation`` as written: the default of actions that give none (see :func:`isolation_of`)."""
        return self.top.get("isolation")

    @property
    def uses_ids(self) -> bool:
        """Whether the file is in hookbus's shape (entries with ids) rather than PRX's plain one."""
        return any("id" in entry.fields for entry in self.entries)

    def runnable_by_pattern(self) -> dict[str, tuple[HookEntry, ...]]:
        """Enabled entries grouped by the NATS pattern the worker subscribes to."""
        groups: dict[str, list[HookEntry]] = {}
        for entry in self.entries:
            if entry.enabled and self.enabled:
                groups.setdefault(entry.pattern, []).append(entry)
        return {pattern: tuple(group) for pattern, group in groups.items()}

    def matching(self, subject: str) -> list[HookEntry]:
        """Enabled entries an event on ``subject`` triggers."""
        return [e for e in self.entries if e.enabled and self.enabled and matches(e.pattern, subject)]

    def locate(self, hook_id: str) -> tuple[int, bool]:
        """The index of the hook ``hook_id`` names, and whether it was named the PRX way.

        hookbus's ids first; then PRX's: ``<event>`` or ``<event>:<n>``, the
        n-th action (from 0) of that event in file order.
        """
        for index, entry in enumerate(self.entries):
            if entry.id == hook_id:
                return index, False
        event, sep, number = hook_id.rpartition(":")
        if not (sep and number.isascii() and number.isdigit()):
            event, number = hook_id, "0"
        event = prx_key(event)
        same = [index for index, entry in enumerate(self.entries) if entry.event == event]
        if int(number) < len(same):
            return same[int(number)], True
        raise HookNotFound(hook_id)

    def key_for(self, event: str) -> str:
        """Where a new hook of ``event`` goes: the key the file already uses for it, else the event."""
        return next((entry.key for entry in self.entries if entry.event == event), event)

    def items(self) -> list[tuple[str, Mapping[str, Any]]]:
        """The entries as (key, object as written), in file order."""
        return [(entry.key, entry.fields) for entry in self.entries]

    def rebuilt(self, items: Iterable[tuple[str, Mapping[str, Any]]]) -> HooksConfig:
        """This file with other entries: read exactly as the file written from them will be."""
        return build(self.top, _grouped(items).items())

    def to_json_bytes(self) -> bytes:
        """hooks.json content: the top-level fields as read, entries grouped under their keys, in file order."""
        return orjson.dumps({**self.top, "hooks": _grouped(self.items())}, option=orjson.OPT_INDENT_2) + b"\n"


def _grouped(items: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for key, fields in items:
        groups.setdefault(key, []).append(fields)
    return groups


def to_schema(obj: object, kind: type[S], **where: str | None) -> S:
    """``obj`` as the schema type ``kind``, or HookConfigError naming ``where`` and the field."""
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        name, reason = field_problem(exc)
        allowed = getattr(kind, "__struct_fields__", None)
        if reason == "unknown field" and allowed:
            reason += f" (allowed: {', '.join(allowed)})"
        raise HookConfigError(reason, field=name, **where) from None


def prx_key(key: str) -> str:
    """PRX's reading of a key: trimmed; a PRX event name in any case and with ``-`` for ``_`` is that name.

    Other keys (subjects, patterns) are only trimmed: their case and ``-`` are meaningful.
    """
    trimmed = key.strip()
    folded = trimmed.translate(_PRX_FOLD)
    return folded if folded in PRX_EVENTS else trimmed


def read_key(key: str, warnings: list[str], **where: str | None) -> tuple[str, str]:
    """A hooks.json key as (its event, the NATS pattern to subscribe to): the one place keys are read.

    A key PRX would read differently from how it is written (``Tool-Call-Start``)
    is read the same way, with a warning naming it as written.
    """
    event = prx_key(key)
    if event != key:
        warnings.append(f"{where.get('file') or 'hooks'}: key {key!r} is read as {event!r} (as PRX reads it)")
    warn_misspelt(event, where.get("file") or "hooks", warnings)
    return event, parse_event_key(event, **where)


def parse_event_key(key: object, **where: str | None) -> str:
    """The NATS pattern of an event key, or HookConfigError."""
    try:
        return normalise_pattern(key)
    except SubjectError as exc:
        raise HookConfigError(f"not an event name, subject or pattern: {exc.reason}", **where) from None


def refusal(action: HookAction) -> str | None:
    """Why the security rules refuse ``action`` on sight, or None."""
    return command_problem(action.command) or nul_problem(action.args, action.env) or cwd_problem(action.cwd)


def derived_id(event: str, action: HookAction) -> str:
    """A stable id for an entry the file gives none: a digest of its content."""
    digest = hashlib.sha256(orjson.dumps([event, action.to_json()], option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"hook_{digest[:10]}"


def _action(doc: ShellAction, default_timeout_ms: int) -> HookAction:
    """The action with PRX's defaults for what is absent or null."""
    args, env = tuple(doc.args or ()), dict(doc.env or {})
    timeout_ms = doc.timeout_ms or default_timeout_ms
    return HookAction(doc.command, args, env, doc.cwd, timeout_ms, bool(doc.stdin_json), doc.isolation)


def isolation_of(action: HookAction, file_default: object) -> Isolation | None:
    """How a hook is isolated: its own ``isolation``, else the file's (``true``: the defaults); None: not at all."""
    chosen = action.isolation if action.isolation is not None else file_default
    if chosen is True:
        return Isolation()
    if isinstance(chosen, Isolation):
        return chosen
    if isinstance(chosen, Mapping):  # the file's top level as read (validated by the loader)
        return msgspec.convert(chosen, Isolation)
    return None


def make_entry(
    key: str, event: str, pattern: str, obj: object, default_timeout_ms: int, **where: str | None
) -> HookEntry:
    """One entry from its object as written."""
    doc = to_schema(obj, ShellHook, **where)
    assert isinstance(obj, Mapping)
    action = _action(doc, default_timeout_ms)
    enabled = doc.enabled is not False
    hook_id = doc.id or derived_id(event, action)
    return HookEntry(
        hook_id, event, pattern, action, enabled, doc.created_at, doc.updated_at, refusal(action), key, dict(obj)
    )


def build(
    top: Mapping[str, Any], groups: Iterable[tuple[str, Sequence[object]]], file: str | None = None
) -> HooksConfig:
    """A configuration from its top-level fields and its keys' lists of entry objects."""
    default_timeout_ms = top.get("timeout_ms") or DEFAULT_TIMEOUT_MS
    warnings: list[str] = []
    entries: list[HookEntry] = []
    for key, objects in groups:
        event, pattern = read_key(key, warnings, file=file, entry=f"hooks.{key}")
        for index, obj in enumerate(objects):
            where = {"file": file, "entry": f"hooks.{key}[{index}]"}
            entries.append(make_entry(key, event, pattern, obj, default_timeout_ms, **where))
    return HooksConfig(_unique_ids(entries, file), dict(top), tuple(warnings))


def parse_config(data: bytes, file: str) -> HooksConfig:
    """Parse hooks.json content; raise HookConfigError naming file, key and index, and field."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise HookConfigError(f"not valid JSON ({exc})", file=file) from None
    checked = to_schema(doc, ShellHooksFile, file=file)
    assert isinstance(doc, dict)
    top = {name: value for name, value in doc.items() if name != "hooks"}
    groups = [
        (key, to_schema(objects, list[object], file=file, entry=f"hooks.{key}"))
        for key, objects in checked.hooks.items()
    ]
    return build(top, groups, file)


def _unique_ids(entries: list[HookEntry], file: str | None) -> tuple[HookEntry, ...]:
    """Refuse duplicate explicit ids; number duplicate derived ones (identical entries)."""
    seen: set[str] = set()
    out: list[HookEntry] = []
    for entry in entries:
        hook_id, n = entry.id, 1
        while hook_id in seen:
            if "id" in entry.fields:
                raise HookConfigError(f"duplicate id {entry.id!r}", file=file, entry=f"hooks.{entry.key}", field="id")
            n += 1
            hook_id = f"{entry.id}-{n}"
        seen.add(hook_id)
        out.append(entry if hook_id == entry.id else replace(entry, id=hook_id))
    return tuple(out)


def checked_for_api(entry: HookEntry) -> HookEntry:
    """``entry`` if the HTTP API may write it: stricter than the file, a hook the security rules
    would refuse, or whose env would be ignored, is an error, turned away at the door."""
    if entry.refused is not None:
        raise HookConfigError(f"refused: {entry.refused}", entry="action")
    ignored = entry.action.ignored_env()
    if ignored:
        raise HookConfigError(f"a hook's env may not set {', '.join(ignored)}", entry="action", field="env")
    return entry


def parse_api_hook(
    body: object, *, hook_id: str, created_at: str | None = None, default_timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> HookEntry:
    """A hook from an HTTP API write in hookbus's shape (``event``, ``action``, ``enabled``).

    Same rules as the file, and stricter (:func:`checked_for_api`). The entry
    is to be written in hookbus's full shape (``fields``).
    """
    if not isinstance(body, dict):
        raise HookConfigError(f"expected a JSON object, got {json_type(body)}")
    doc = to_schema(body, ShellHookBody)
    event, pattern = read_key(doc.event, [], field="event")
    action = _action(to_schema(doc.action, ShellAction, entry="action"), default_timeout_ms)
    stamp = now_timestamp()
    enabled = doc.enabled is not False
    entry = HookEntry(hook_id, event, pattern, action, enabled, created_at or stamp, stamp, refusal(action), event)
    return checked_for_api(replace(entry, fields=entry.hookbus_fields()))
