"""hooks.json: parse, validate and write it. The one validator of hooks.

The format is PRX's::

    {"hooks": {"<event>": [{"command": ..., "args": [...], "env": {...}, "cwd": ...,
                            "timeout_ms": 5000, "stdin_json": true}]}}

An ``<event>`` key is a PRX event name (``tool_call``), a subject
(``eva.custom.deploy``) or a pattern (``prx.lifecycle.*``, ``*``); see
:func:`bus.core.subjects.normalise_pattern`. Entries may also carry ``id``,
``enabled``, ``created_at`` and ``updated_at`` (written by the HTTP API); a plain
PRX file without them works, and its entries get ids derived from their content.

Two kinds of problem, told apart on purpose:

- a structural one (bad JSON, wrong type, unknown field) makes the whole file
  invalid: :class:`~bus.core.errors.HookConfigError` naming file, entry and field;
  the worker keeps its last good configuration;
- a security one (shell metacharacters, NUL bytes, a climbing ``cwd``) refuses
  that entry only: it is loaded with ``refused`` set, logged, counted, never run.

The HTTP API rejects both kinds (400), through the same functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import orjson

from bus.core.clock import now_timestamp
from bus.core.errors import HookConfigError, SubjectError
from bus.core.subjects import TOKEN_RE, matches, normalise_pattern
from subscribers.shell_hooks.security import command_problem, cwd_problem, is_allowed_env, nul_problem

DEFAULT_TIMEOUT_MS: Final = 30_000
#: Longest timeout accepted (a day): anything longer is a typo in units.
MAX_TIMEOUT_MS: Final = 24 * 3600 * 1000
ACTION_FIELDS: Final = ("command", "args", "env", "cwd", "timeout_ms", "stdin_json")
META_FIELDS: Final = ("id", "enabled", "created_at", "updated_at")


@dataclass(frozen=True, slots=True)
class HookAction:
    """What to run: the PRX action fields."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    stdin_json: bool = False

    def to_json(self) -> dict[str, Any]:
        """The action as the PRX document shows it (env and cwd only when set)."""
        out: dict[str, Any] = {"command": self.command, "args": list(self.args)}
        if self.env:
            out["env"] = dict(self.env)
        if self.cwd is not None:
            out["cwd"] = self.cwd
        out["timeout_ms"] = self.timeout_ms
        out["stdin_json"] = self.stdin_json
        return out

    def ignored_env(self) -> list[str]:
        """Keys of ``env`` that the sanitised environment will not let through."""
        return sorted(key for key in self.env if not is_allowed_env(key))


@dataclass(frozen=True, slots=True)
class HookEntry:
    """One hook: an event key, an action, and the management fields."""

    id: str
    event: str
    pattern: str
    action: HookAction
    enabled: bool = True
    created_at: str | None = None
    updated_at: str | None = None
    #: Why the security rules refuse this entry (never run), or None.
    refused: str | None = None

    def to_api(self) -> dict[str, Any]:
        """The hook object of the HTTP API."""
        return {
            "id": self.id,
            "event": self.event,
            "action": self.action.to_json(),
            "enabled": self.enabled,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def to_file(self) -> dict[str, Any]:
        """The entry as written to hooks.json: the action fields plus the management ones."""
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

    def runnable_by_pattern(self) -> dict[str, tuple[HookEntry, ...]]:
        """Enabled entries grouped by the NATS pattern the worker subscribes to."""
        groups: dict[str, list[HookEntry]] = {}
        for entry in self.entries:
            if entry.enabled:
                groups.setdefault(entry.pattern, []).append(entry)
        return {pattern: tuple(group) for pattern, group in groups.items()}

    def matching(self, subject: str) -> list[HookEntry]:
        """Enabled entries an event on ``subject`` triggers."""
        return [e for e in self.entries if e.enabled and matches(e.pattern, subject)]

    def find(self, hook_id: str) -> HookEntry | None:
        return next((entry for entry in self.entries if entry.id == hook_id), None)

    def to_json_bytes(self) -> bytes:
        """hooks.json content: entries grouped under their event key, in file order."""
        hooks: dict[str, list[dict[str, Any]]] = {}
        for entry in self.entries:
            hooks.setdefault(entry.event, []).append(entry.to_file())
        return orjson.dumps({"hooks": hooks}, option=orjson.OPT_INDENT_2) + b"\n"


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _expect(obj: Mapping[str, Any], name: str, kind: type, what: str, where: dict[str, str | None]) -> Any:
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise HookConfigError(f"expected {what}, got {_type_name(value)}", field=name, **where)
    return value


def _string_list(value: object, where: dict[str, str | None]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise HookConfigError(f"expected a list of strings, got {_type_name(value)}", field="args", **where)
    return tuple(value)


def _string_map(value: object, where: dict[str, str | None]) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise HookConfigError("expected an object of string values", field="env", **where)
    return dict(value)


def parse_action(obj: object, *, allowed_extra: tuple[str, ...] = (), **where: str | None) -> HookAction:
    """Validate the PRX action fields of ``obj``; raise HookConfigError naming the field.

    ``allowed_extra`` names other fields the caller handles (the file's
    management fields); any further field is an error.
    """
    if not isinstance(obj, dict):
        raise HookConfigError(f"a hook action must be an object, got {_type_name(obj)}", **where)
    for name in obj:
        if name not in ACTION_FIELDS and name not in allowed_extra:
            raise HookConfigError(
                f"unknown field (allowed: {', '.join(ACTION_FIELDS + allowed_extra)})", field=name, **where
            )
    if "command" not in obj:
        raise HookConfigError("required field is missing", field="command", **where)
    command = _expect(obj, "command", str, "a string", where)
    args = _string_list(obj["args"], where) if "args" in obj else ()
    env = _string_map(obj["env"], where) if "env" in obj else {}
    cwd = None if obj.get("cwd") is None else _expect(obj, "cwd", str, "a string", where)
    timeout_ms = DEFAULT_TIMEOUT_MS
    if "timeout_ms" in obj:
        timeout_ms = _expect(obj, "timeout_ms", int, "a whole number of milliseconds", where)
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise HookConfigError(
                f"must be between 1 and {MAX_TIMEOUT_MS}, got {timeout_ms}", field="timeout_ms", **where
            )
    stdin_json = _expect(obj, "stdin_json", bool, "true or false", where) if "stdin_json" in obj else False
    return HookAction(command, args, env, cwd, timeout_ms, stdin_json)


def refusal(action: HookAction) -> str | None:
    """Why the security rules refuse ``action`` on sight, or None."""
    return command_problem(action.command) or nul_problem(action.args, action.env) or cwd_problem(action.cwd)


def parse_event_key(key: object, **where: str | None) -> str:
    """The NATS pattern of an event key, or HookConfigError."""
    try:
        return normalise_pattern(key)
    except SubjectError as exc:
        raise HookConfigError(f"not an event name, subject or pattern: {exc.reason}", **where) from None


def derived_id(event: str, action: HookAction) -> str:
    """A stable id for an entry the file gives none: a digest of its content."""
    digest = hashlib.sha256(orjson.dumps([event, action.to_json()], option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"hook_{digest[:10]}"


def _parse_meta(obj: dict[str, Any], where: dict[str, str | None]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if "id" in obj:
        meta["id"] = _expect(obj, "id", str, "a string", where)
        if not TOKEN_RE.fullmatch(meta["id"]):
            raise HookConfigError("an id must match [A-Za-z0-9_-]+", field="id", **where)
    if "enabled" in obj:
        meta["enabled"] = _expect(obj, "enabled", bool, "true or false", where)
    for name in ("created_at", "updated_at"):
        if obj.get(name) is not None:
            meta[name] = _expect(obj, name, str, "a timestamp string", where)
    return meta


def parse_entry(event: str, pattern: str, obj: object, *, file: str | None, entry: str) -> HookEntry:
    """One hooks.json entry: action fields plus optional management fields."""
    where: dict[str, str | None] = {"file": file, "entry": entry}
    action = parse_action(obj, allowed_extra=META_FIELDS, **where)
    assert isinstance(obj, dict)
    meta = _parse_meta(obj, where)
    hook_id = meta.pop("id", None) or derived_id(event, action)
    return HookEntry(hook_id, event, pattern, action, refused=refusal(action), **meta)


def parse_config(data: bytes, file: str) -> HooksConfig:
    """Parse hooks.json content; raise HookConfigError naming file, entry and field."""
    try:
        top = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise HookConfigError(f"not valid JSON ({exc})", file=file) from None
    if not isinstance(top, dict):
        raise HookConfigError(f"expected a JSON object with a 'hooks' key, got {_type_name(top)}", file=file)
    for name in top:
        if name != "hooks":
            raise HookConfigError("unknown top-level field (only 'hooks' is allowed)", file=file, field=name)
    hooks = top.get("hooks", {})
    if not isinstance(hooks, dict):
        raise HookConfigError(
            f"expected an object of event -> actions, got {_type_name(hooks)}", file=file, field="hooks"
        )
    entries: list[HookEntry] = []
    for key, actions in hooks.items():
        pattern = parse_event_key(key, file=file, entry=f"hooks.{key}")
        if not isinstance(actions, list):
            raise HookConfigError(
                f"expected a list of actions, got {_type_name(actions)}", file=file, entry=f"hooks.{key}"
            )
        for index, obj in enumerate(actions):
            entries.append(parse_entry(key, pattern, obj, file=file, entry=f"hooks.{key}[{index}]"))
    return HooksConfig(_unique_ids(entries, file))


def _unique_ids(entries: list[HookEntry], file: str) -> tuple[HookEntry, ...]:
    """Refuse duplicate explicit ids; number duplicate derived ones (identical entries)."""
    seen: set[str] = set()
    out: list[HookEntry] = []
    for entry in entries:
        hook_id, n = entry.id, 1
        while hook_id in seen:
            if not hook_id.startswith("hook_"):
                raise HookConfigError(f"duplicate id {entry.id!r}", file=file, entry=f"hooks.{entry.event}", field="id")
            n += 1
            hook_id = f"{entry.id}-{n}"
        seen.add(hook_id)
        out.append(entry if hook_id == entry.id else replace(entry, id=hook_id))
    return tuple(out)


def parse_api_hook(body: object, *, hook_id: str, created_at: str | None = None) -> HookEntry:
    """A hook object from an HTTP API write (``event``, ``action``, ``enabled``).

    Same rules as the file, and stricter: an entry the security rules would
    refuse is an error here, so that a bad hook is turned away at the door.
    """
    if not isinstance(body, dict):
        raise HookConfigError(f"expected a JSON object, got {_type_name(body)}")
    for name in body:
        if name not in ("event", "action", "enabled", "id", "created_at", "updated_at"):
            raise HookConfigError("unknown field (allowed: event, action, enabled)", field=name)
    event = body.get("event")
    if not isinstance(event, str):
        raise HookConfigError(f"expected an event name, subject or pattern, got {_type_name(event)}", field="event")
    pattern = parse_event_key(event, field="event")
    action = parse_action(body.get("action"), entry="action")
    enabled = body.get("enabled", True)
    if not isinstance(enabled, bool):
        raise HookConfigError(f"expected true or false, got {_type_name(enabled)}", field="enabled")
    reason = refusal(action)
    if reason is not None:
        raise HookConfigError(f"refused: {reason}", entry="action")
    ignored = action.ignored_env()
    if ignored:
        raise HookConfigError(f"a hook's env may not set {', '.join(ignored)}", entry="action", field="env")
    stamp = now_timestamp()
    return HookEntry(hook_id, event, pattern, action, enabled, created_at or stamp, stamp)
