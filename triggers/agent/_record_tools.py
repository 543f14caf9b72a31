"""The agent's tools over its own handler records, and ``event_emit``.

``handler_list``, ``handler_save``, ``handler_enable`` and ``handler_move``
write drafts only: every version the agent writes (new code, enabled or not,
new before/after references) has a new identity and waits for an operator's
``hookbus approve``; the approved version keeps serving meanwhile. The model
cannot silently rewrite the order of its own constraints: ``handler_move``
rewrites references, never numbers, and a reorder is an approval matter too.
``event_emit`` publishes ``eva.custom.<name>`` at the turn's depth.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from bus._client import Bus
from bus._core.errors import HookbusError, RecordError
from bus._core.subjects import TOKEN_RE
from bus._records.record import Record, from_fields
from bus._records.store import Approved, RecordStore
from bus._records.subjects import RECORDS_MODULE

_NAME: Final = {"type": "string", "description": "the record's name ([A-Za-z0-9_-]+)"}
_REFS: Final = {"type": "array", "items": {"type": "string"}}
#: Fields of a record the model may set with handler_save (informational ones are set by the tool).
_SAVED: Final = (
    "name",
    "stage",
    "source",
    "match",
    "when",
    "before",
    "after",
    "inputs",
    "outputs",
    "fail_closed",
    "timeout",
    "enabled",
)


#: A tool as triggers.agent._tools builds it: name, description, parameters' schema, the coroutine running it.
ToolSpec = tuple[str, str, dict[str, Any], Callable[[dict[str, Any]], Awaitable[str]]]


class RecordTools:
    """The tools of one agent over the records of one runner module."""

    def __init__(self, bus: Bus, agent: str, module: str = RECORDS_MODULE) -> None:
        self.bus = bus
        self.agent = agent
        self.store = RecordStore(bus.port, module)

    def specs(self) -> list[ToolSpec]:
        """Each tool as (name, description, JSON schema of its arguments, coroutine function)."""
        listed = ("handler_list", "List your handler records with their state.", _object({}), self.list_records)
        save = (
            "handler_save",
            "Write a handler record (Python: async def handle(stage, payload, ctx) returning Continue(), "
            "Cancel(reason) or Patch(payload)). It runs only after an operator approves it.",
            _object(
                {
                    "name": _NAME,
                    "stage": {"type": "string"},
                    "source": {"type": "string"},
                    "match": _REFS,
                    "before": _REFS,
                    "after": _REFS,
                    "inputs": {
                        "type": "array",
                        "items": {"type": ["string", "object"]},
                        "description": "bag keys it reads (a key, or {key, default, required})",
                    },
                    "outputs": {"type": "array", "items": {"type": "string"}, "description": "bag keys it writes"},
                    "fail_closed": {"type": "boolean"},
                    "timeout": {"type": "number"},
                },
                ["name", "stage", "source"],
            ),
            self.save,
        )
        enable = (
            "handler_enable",
            "Enable or disable one of your records (the change waits for an operator's approval).",
            _object({"name": _NAME, "enabled": {"type": "boolean"}}, ["name", "enabled"]),
            self.enable,
        )
        move = (
            "handler_move",
            "Reorder a record by naming the handlers it runs before/after (waits for approval).",
            _object({"name": _NAME, "before": _REFS, "after": _REFS}, ["name"]),
            self.move,
        )
        emit = (
            "event_emit",
            "Publish a custom event eva.custom.<name> with a JSON object payload.",
            _object({"name": {"type": "string"}, "payload": {"type": "object"}}, ["name"]),
            self.emit,
        )
        return [listed, save, enable, move, emit]

    async def list_records(self, arguments: dict[str, Any]) -> str:
        drafts = await self.store.all()
        copies = await self.store.approved()
        lines = []
        for name in sorted(drafts.keys() | copies.keys()):
            draft, copy = drafts.get(name), copies.get(name)
            if isinstance(draft, RecordError):
                lines.append(f"{name}: malformed ({draft.reason})")
                continue
            approved = await self.store.trusted(name)
            shown = draft if draft is not None else _record_of(copy)
            state = _state(shown, approved, self.store.module, copy)
            decl = shown.declaration(self.store.module)  # references qualified, as the chain reads them
            refs = f" before={list(decl.before)} after={list(decl.after)}"
            lines.append(f"{name}: stage {shown.stage}, {state}{refs}")
        return "\n".join(lines) or "no handler records"

    async def save(self, arguments: dict[str, Any]) -> str:
        fields: dict[str, Any] = {key: arguments[key] for key in _SAVED if key in arguments}
        record = from_fields(fields, author=f"agent:{self.agent}")
        return await self._write(record)

    async def enable(self, arguments: dict[str, Any]) -> str:
        enabled = arguments.get("enabled")
        if not isinstance(enabled, bool):
            raise ValueError("handler_enable needs a boolean 'enabled'")
        return await self._write((await self._get(arguments)).with_changes(enabled=enabled))

    async def move(self, arguments: dict[str, Any]) -> str:
        record = await self._get(arguments)
        changes = {side: arguments[side] for side in ("before", "after") if side in arguments}
        if not changes:
            raise ValueError("handler_move needs 'before' and/or 'after' (handler names)")
        for side, refs in changes.items():
            if not isinstance(refs, list) or not all(isinstance(ref, str) for ref in refs):
                raise ValueError(f"handler_move: '{side}' must be a list of handler names")
        return await self._write(record.with_changes(**changes))

    async def emit(self, arguments: dict[str, Any]) -> str:
        name = arguments.get("name")
        payload = arguments.get("payload", {})
        if not isinstance(name, str) or not all(TOKEN_RE.fullmatch(part) for part in name.split(".")):
            raise ValueError("event_emit needs a 'name' of dot-separated [A-Za-z0-9_-]+ tokens")
        if not isinstance(payload, dict):
            raise ValueError("event_emit: 'payload' must be a JSON object")
        await self.bus.emit(f"eva.custom.{name}", payload)
        return f"emitted eva.custom.{name}"

    async def _get(self, arguments: dict[str, Any]) -> Record:
        name = arguments.get("name")
        if not isinstance(name, str):
            raise ValueError("a record 'name' is needed")
        record = await self.store.get(name)
        if record is None:
            raise RecordError(name, "no such record (handler_list shows yours)")
        return record

    async def _write(self, record: Record) -> str:
        try:
            identity = await self.store.put(record.with_changes(author=f"agent:{self.agent}"))
        except HookbusError as exc:
            raise RecordError(record.name, f"not saved: {exc}") from None
        qualname = f"{self.store.module}.{record.name}"
        return f"saved {qualname} (identity {identity[:12]}): it waits for an operator's approval (hookbus approve)"


def _record_of(copy: object) -> Record:
    assert isinstance(copy, Approved)  # listed without a draft: an approved copy
    return copy.record


def _state(record: Record, approved: str | None, module: str, copy: object) -> str:
    if getattr(copy, "disabled", None):
        return f"disabled by the runner ({copy.disabled})"  # type: ignore[attr-defined]
    if record.identity(module) == approved:
        return "approved" if record.enabled else "approved, disabled"
    return "waiting for approval"


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema
