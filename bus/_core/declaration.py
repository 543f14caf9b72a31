"""A handler's declaration: what a module tells the kernel about each handler.

The declaration is normalised (sorted references, qualified names, canonical
matcher, float timeout) so that one handler declared two ways is one
declaration, and its SHA-256 is the handler's identity for trust. The
composition fields (``priority``, ``when``) are left out of the normalised form
while they hold their defaults, so a handler declared without them keeps the
identity it had before they existed (and its approval).
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from bus._core.errors import DeclarationError
from bus._core.stages import validate_stage
from bus._core.subjects import TOKEN_RE

log = logging.getLogger("hookbus.middleware")

#: Seconds a handler gets when it does not say.
DEFAULT_TIMEOUT: Final = 2.0
#: The protocol's bound on a declared timeout: larger ones are clamped (with a warning) before hashing.
MAX_TIMEOUT: Final = 3600.0
#: How long a kernel waits for one handler at most unless its operator sets another ceiling
#: (``MiddlewareOptions.timeout_ceiling``; docs/middleware.md, Timeouts), whatever the handler declared.
DEFAULT_TIMEOUT_CEILING: Final = 30.0
#: The context fields a ``when`` may filter on, as a declaration names them (plural) and as a call's ctx does.
WHEN_FIELDS: Final = {"agents": "agent", "users": "user", "sessions": "session", "templates": "template"}
#: Priorities are small integers (higher runs earlier): a bound keeps every implementation's arithmetic exact.
PRIORITY_LIMIT: Final = 1_000_000
#: Bag keys one handler may declare as inputs or as outputs.
MAX_PORTS: Final = 32


@dataclass(frozen=True, slots=True)
class Input:
    """A bag value a handler reads: ``key`` (agent_os's ``from``); ``required`` (skipped without it), else
    ``default`` (text, bool, null); ``port``: the name the handler reads it by in ``ctx.inputs`` (None: ``key``)."""

    key: str
    required: bool = False
    default: str | bool | None = None
    port: str | None = None

    @property
    def name(self) -> str:
        """What ``ctx.inputs`` calls it: its port, else its key."""
        return self.port or self.key

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"key": self.key, "required": self.required, "default": self.default}
        if self.port is not None:
            wire["port"] = self.port  # only when named: a declaration without ports keeps its identity
        return wire


@dataclass(frozen=True, slots=True)
class When:
    """Whose calls a handler takes: every filled field must match the call's context (glob patterns).

    An empty ``When`` takes every call. A field the declaration fills and the
    call does not carry does not match: the handler is skipped for that call.
    """

    agents: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.agents or self.users or self.sessions or self.templates)

    def matches(self, ctx: Any) -> bool:
        """Whether a call whose context maps ``agent``/``user``/``session``/``template`` to texts is taken."""
        for plural, single in WHEN_FIELDS.items():
            patterns: tuple[str, ...] = getattr(self, plural)
            if patterns:
                value = ctx.get(single)
                if not isinstance(value, str) or not any(fnmatch.fnmatchcase(value, p) for p in patterns):
                    return False
        return True

    def to_wire(self) -> dict[str, list[str]]:
        """The filled fields only (sorted lists): the normalised form."""
        return {plural: list(getattr(self, plural)) for plural in WHEN_FIELDS if getattr(self, plural)}


@dataclass(frozen=True, slots=True)
class Declaration:
    """One handler on one stage, normalised."""

    module: str
    name: str
    stage: str
    fail_closed: bool = False
    timeout: float = DEFAULT_TIMEOUT
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    match: tuple[str, ...] = ()
    code: str = ""
    #: Higher runs earlier among handlers the before/after references leave unordered.
    priority: int = 0
    when: When = When()
    #: Bag keys it reads and writes (``retrieval.query``; a bare port is ``<handler>.<port>``).
    inputs: tuple[Input, ...] = ()
    outputs: tuple[str, ...] = ()

    @property
    def qualname(self) -> str:
        """``module.handler``: how references, the journal and the CLI name it."""
        return f"{self.module}.{self.name}"

    def identity(self) -> str:
        """SHA-256 of the normalised declaration: equal for the same handler however declared."""
        return hashlib.sha256(orjson.dumps(self.to_wire(), option=orjson.OPT_SORT_KEYS)).hexdigest()

    def to_wire(self) -> dict[str, Any]:
        """The normalised form: nine fields always; ``priority``, ``when``, ``inputs``, ``outputs`` only when set."""
        wire: dict[str, Any] = {
            "module": self.module,
            "name": self.name,
            "stage": self.stage,
            "fail_closed": self.fail_closed,
            "timeout": self.timeout,
            "before": list(self.before),
            "after": list(self.after),
            "match": list(self.match),
            "code": self.code,
        }
        if self.priority:
            wire["priority"] = self.priority
        if self.when:
            wire["when"] = self.when.to_wire()
        if self.inputs:
            wire["inputs"] = [item.to_wire() for item in self.inputs]
        if self.outputs:
            wire["outputs"] = list(self.outputs)
        return wire


def declare(
    module: str,
    name: str,
    stage: str,
    *,
    fail_closed: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    before: str | Iterable[str] = (),
    after: str | Iterable[str] = (),
    match: str | Iterable[str] | None = None,
    code: str = "",
    priority: int = 0,
    when: When | Mapping[str, Any] | None = None,
    inputs: Iterable[str | Mapping[str, Any]] | None = None,
    outputs: str | Iterable[str] | None = None,
) -> Declaration:
    """Build a normalised Declaration, raising DeclarationError for what is wrong."""
    where = f"{module}.{name}"
    for part, what in ((module, "module name"), (name, "handler name")):
        if not isinstance(part, str) or not TOKEN_RE.fullmatch(part):
            raise DeclarationError(where, f"the {what} must match [A-Za-z0-9_-]+")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise DeclarationError(where, f"timeout must be a positive number of seconds, not {timeout!r}")
    if timeout > MAX_TIMEOUT:
        log.warning("handler %s: timeout %gs clamped to %gs: the protocol's bound", where, timeout, MAX_TIMEOUT)
        timeout = MAX_TIMEOUT
    return Declaration(
        module=module,
        name=name,
        stage=validate_stage(stage),
        fail_closed=bool(fail_closed),
        timeout=float(timeout),
        before=_references(module, before, where),
        after=_references(module, after, where),
        match=_matcher(match, where),
        code=code,
        priority=_priority(priority, where),
        when=_when(when, where),
        inputs=_inputs(name, inputs, where),
        outputs=_outputs(name, outputs, where),
    )


def _priority(value: Any, where: str) -> int:
    """An integer within the limit; an integral float (``5.0``) is that integer, as JSON readers elsewhere see it."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > PRIORITY_LIMIT:
        raise DeclarationError(
            where, f"priority must be an integer from -{PRIORITY_LIMIT} to {PRIORITY_LIMIT}, not {value!r}"
        )
    return value


def _when(value: When | Mapping[str, Any] | None, where: str) -> When:
    """``{agents: [...], users: [...], sessions: [...], templates: [...]}``: each a name, a glob or a list of them."""
    if value is None or isinstance(value, When):
        return value or When()
    if not isinstance(value, Mapping):
        raise DeclarationError(where, f"when must be a mapping of {', '.join(WHEN_FIELDS)}, not {value!r}")
    unknown = sorted(str(key) for key in value if key not in WHEN_FIELDS)
    if unknown:
        raise DeclarationError(
            where, f"when has unknown field(s) {', '.join(unknown)} (known: {', '.join(WHEN_FIELDS)})"
        )
    fields: dict[str, tuple[str, ...]] = {}
    for plural in WHEN_FIELDS:
        raw = value.get(plural)
        if isinstance(raw, str):
            raw = [raw]
        if raw is not None and not isinstance(raw, list | tuple):
            raise DeclarationError(where, f"when.{plural} must be a list of names or glob patterns, not {raw!r}")
        patterns = sorted(set(_names(raw, None, f"{where} when.{plural}")))
        if "" in patterns:
            raise DeclarationError(where, f"when.{plural} holds an empty pattern")
        fields[plural] = tuple(patterns)
    return When(**fields)


def bag_key(handler: str, key: str, where: str) -> str:
    """A bag key: dotted tokens; a bare port (one token) is ``<handler>.<port>``."""
    if not isinstance(key, str):
        raise DeclarationError(where, f"a bag key must be a string, not {key!r}")
    key = key.strip()
    parts = key.split(".")
    if not key or not all(TOKEN_RE.fullmatch(part) for part in parts):
        raise DeclarationError(where, f"bag key {key!r} is not dotted [A-Za-z0-9_-]+ tokens")
    return key if len(parts) > 1 else f"{handler}.{key}"


def _outputs(handler: str, value: str | Iterable[str] | None, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    keys = sorted({bag_key(handler, key, where) for key in ([value] if isinstance(value, str) else list(value))})
    if len(keys) > MAX_PORTS:
        raise DeclarationError(where, f"{len(keys)} outputs: at most {MAX_PORTS}")
    return tuple(keys)


def _inputs(handler: str, value: Iterable[str | Mapping[str, Any]] | None, where: str) -> tuple[Input, ...]:
    """Each a key or ``{key|from, required, default, port}``, or a map ``{port: {from, default, required}}`` as
    agent_os writes them; sorted by key, one entry per key."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        value = [_port_entry(port, spec, where) for port, spec in value.items()]
    elif isinstance(value, str):
        raise DeclarationError(where, f"inputs must be a list of keys or {{key, required, default}}, not {value!r}")
    out: dict[str, Input] = {}
    for item in value:
        found = _input(handler, item, where)
        if found.key in out:
            raise DeclarationError(where, f"input {found.key} declared twice")
        out[found.key] = found
    if len({item.name for item in out.values()}) != len(out):
        raise DeclarationError(where, "two inputs read by the same port name")
    if len(out) > MAX_PORTS:
        raise DeclarationError(where, f"{len(out)} inputs: at most {MAX_PORTS}")
    return tuple(out[key] for key in sorted(out))


def _port_entry(port: object, spec: object, where: str) -> dict[str, Any]:
    """One ``port: {from, default, required}`` of the map form (``port: key`` names the key alone)."""
    if not isinstance(port, str) or not TOKEN_RE.fullmatch(port):
        raise DeclarationError(where, f"an input port is one [A-Za-z0-9_-]+ token, not {port!r}")
    if isinstance(spec, str):
        spec = {"from": spec}
    if not isinstance(spec, Mapping):
        raise DeclarationError(where, f"input port {port}: {{from, default, required}}, not {spec!r}")
    return {"key": port, **spec, "port": port} if "from" not in spec and "key" not in spec else {**spec, "port": port}


def _input(handler: str, item: object, where: str) -> Input:
    if isinstance(item, str):
        item = {"key": item}
    if not isinstance(item, Mapping):
        raise DeclarationError(where, f"an input must be a key or {{key, required, default}}, not {item!r}")
    unknown = sorted(str(field) for field in item if field not in ("key", "from", "required", "default", "port"))
    if unknown:
        raise DeclarationError(where, f"input has unknown field(s) {', '.join(unknown)}")
    if "key" in item and "from" in item:
        raise DeclarationError(where, "an input names its key once: 'key' or its alias 'from'")
    key = bag_key(handler, item.get("key", item.get("from")), where)
    required, default, port = item.get("required", False), item.get("default"), item.get("port")
    if not isinstance(required, bool):
        raise DeclarationError(where, f"input {key}: required must be true or false, not {required!r}")
    if default is not None and not isinstance(default, str | bool):
        raise DeclarationError(where, f"input {key}: a default is a string, true, false or null, not {default!r}")
    if port is not None and (not isinstance(port, str) or not TOKEN_RE.fullmatch(port)):
        raise DeclarationError(where, f"input {key}: a port is one [A-Za-z0-9_-]+ token, not {port!r}")
    return Input(key, required, default, None if port == key else port)


def _names(value: str | Iterable[str] | None, split: str | None, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in (value.split(split) if split else [value]) if part.strip()]
    parts = list(value)
    for part in parts:
        if not isinstance(part, str):
            raise DeclarationError(where, f"a name must be a string, not {part!r}")
    return [part.strip() for part in parts]


def _references(module: str, value: str | Iterable[str], where: str) -> tuple[str, ...]:
    """Qualify bare handler names with the declaring module; sort; drop duplicates."""
    out = set()
    for ref in _names(value, None, where):
        parts = ref.split(".")
        if len(parts) > 2 or not all(TOKEN_RE.fullmatch(part) for part in parts):
            raise DeclarationError(where, f"reference {ref!r} is not 'handler' or 'module.handler'")
        out.add(ref if len(parts) == 2 else f"{module}.{ref}")
    return tuple(sorted(out))


def _matcher(value: str | Iterable[str] | None, where: str) -> tuple[str, ...]:
    """``"write_file|apply_patch"`` or a list of names: a sorted tuple of distinct names."""
    names = sorted(set(_names(value, "|", where)))
    if value is not None and not names:
        raise DeclarationError(where, "match names no tool")
    return tuple(names)


def from_wire(obj: dict[str, Any]) -> Declaration:
    """Rebuild (and re-normalise) a declaration received from the registry.

    ``fail_closed`` must be a JSON boolean: a promise to cancel is never read
    out of a string such as ``"false"``.
    """
    fail_closed = obj.get("fail_closed", False)
    if not isinstance(fail_closed, bool):
        raise DeclarationError(
            f"{obj['module']}.{obj['name']}", f"fail_closed must be true or false, not {fail_closed!r}"
        )
    return declare(
        obj["module"],
        obj["name"],
        obj["stage"],
        fail_closed=fail_closed,
        timeout=obj.get("timeout", DEFAULT_TIMEOUT),
        before=obj.get("before", ()),
        after=obj.get("after", ()),
        match=obj.get("match") or None,
        code=obj.get("code", ""),
        priority=obj.get("priority", 0),
        when=obj.get("when"),
        inputs=obj.get("inputs"),
        outputs=obj.get("outputs"),
    )
