"""Compiling rules once, at load: CEL conditions and reason templates, and each rule's declarations.

CEL runs through ``cel-expr-python`` (the CEL C++ runtime's own binding, kept by
the CEL project): a few µs to build a call's activation and about 0.15 µs per
condition inside a run's one program (its shared reads bound once), where
``common-expression-language`` takes about 50 µs to build its context and
about 0.9 µs per condition (docs/rules.md). A condition
sees ``payload``, ``ctx`` (agent, user, session, template, stage) and ``bag``
(the session's per-turn bag, empty without one); a name outside them is
refused at load, with the line of the rule's ``if``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

import orjson

from bus._core.declaration import Declaration, declare
from bus._core.errors import ConfigError, DeclarationError
from bus._middleware.rules.errors import RuleFileError
from bus._middleware.rules.files import RuleFile, RuleText

#: The names a condition reads: all a call's activation may hold.
NAMES: Final = frozenset({"payload", "ctx", "bag"})
_ENV: list[Any] = []  # the CEL environments, made on first use (the ``rules`` extra is imported only then)


def env() -> Any:
    """The CEL environment every rule compiles in: ``payload``, ``ctx`` and ``bag`` are all a rule reads."""
    if not _ENV:
        try:
            from cel_expr_python import cel
            from cel_expr_python.ext.ext_bindings import ExtBindings
        except ImportError:
            raise ConfigError("rule guards need CEL: pip install 'hookbus[rules]'") from None
        mapping = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
        names = {"payload": mapping, "ctx": mapping, "bag": mapping}
        _ENV.append(cel.NewEnv(variables=names))
        _ENV.append(cel.NewEnv(variables=names, extensions=[ExtBindings()]))
    return _ENV[0]


def run_env() -> Any:
    """The environment of a run's programs (bus._middleware.rules.runs): the rules' names and ``cel.bind``, for
    the reads the run's conditions share (bus._middleware.rules.shared); a rule's own ``if`` cannot use it."""
    env()
    return _ENV[1]


_TEMPLATE: Final = re.compile(r"\{\{(.*?)\}\}", re.S)
#: Characters of a rendered reason a rule may produce.
REASON_LIMIT: Final = 1000


@dataclass(frozen=True, slots=True)
class RuleDeclaration(Declaration):
    """A rule's declaration on one stage: its identity is the rule's normalised text's hash, on every stage."""

    rule_identity: str = ""

    def identity(self) -> str:
        return self.rule_identity


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """One compiled rule, ready to run on any of its stages."""

    module: str
    name: str
    text: str  # normalised JSON of its fields: what its identity hashes and a trust record keeps
    identity: str
    condition: Any  # cel Expression
    source: str  # the CEL text, for the journal
    reason: tuple[str | Any, ...]  # literal texts and cel Expressions, in order
    patch: Mapping[str, Any] | None
    shadow: bool
    enabled: bool
    decls: tuple[RuleDeclaration, ...]
    is_global: bool = True
    ask: bool = False  # ``then: ask``: its reason is the ask's, the call is held for an operator
    qualname: str = ""  # ``<file stem>.<name>``, made once (it names the rule on every call's path)
    #: A Cedar rule's policies (bus._middleware.rules.cedar.CedarCheck): its condition is "Cedar denies".
    cedar: Any = None
    #: The names of NAMES its condition and reason may read (a call's activation holds only the chain's).
    reads: frozenset[str] = NAMES

    def __post_init__(self) -> None:
        object.__setattr__(self, "qualname", f"{self.module}.{self.name}")

    @property
    def kind(self) -> str:
        """What it decides when its condition holds: continue, cancel, ask or patch."""
        return "ask" if self.ask else "cancel" if self.reason else "patch" if self.patch is not None else "continue"


def compile_file(parsed: RuleFile) -> tuple[Rule, ...]:
    """Compile every rule of a checked file; RuleFileError (file, line, reason) for the first that fails."""
    return tuple(compile_rule(parsed.stem, rule, parsed.is_global) for rule in parsed.rules)


def compile_rule(module: str, rule: RuleText, is_global: bool = True) -> Rule:
    body = rule.fields
    text = orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()
    identity = hashlib.sha256(f"rule:{module}:{text}".encode()).hexdigest()
    cedar = None
    if "cedar" in body:  # a Cedar rule: its policies parsed once (bus._middleware.rules.cedar)
        from bus._middleware.rules.cedar import check

        cedar = check(body["cedar"], body["default"], rule.file, rule.lines.get("cedar", rule.line))
    condition = _compile(body["if"], rule, "if") if cedar is None else None
    then = body["then"]
    asked = then.get("ask")
    reason = _template(then["cancel"], rule) if "cancel" in then else _template(asked, rule) if asked else ()
    try:
        decls = tuple(_declaration(module, body, stage, text, identity) for stage in body["stage"])
    except DeclarationError as exc:
        raise RuleFileError(rule.file, rule.line, exc.reason) from None
    return Rule(
        module=module,
        name=body["name"],
        text=text,
        identity=identity,
        condition=condition,
        source=body["if"] if cedar is None else body["cedar"],
        reason=reason,
        patch=then.get("patch"),
        ask=asked is not None,
        shadow=body["mode"] == "shadow",
        enabled=body["enabled"],
        decls=decls,
        is_global=is_global,
        cedar=cedar,
        reads=reads(body["if"] if cedar is None else "", then.get("cancel") or "", asked or ""),
    )


def from_text(module: str, text: str) -> Rule:
    """A rule compiled again from its normalised text (a trust record's), e.g. the approved older version."""
    body = orjson.loads(text)
    return compile_rule(module, RuleText(body, f"<approved {module}.{body.get('name')}>", 1, {}))


def _declaration(module: str, body: Mapping[str, Any], stage: str, text: str, identity: str) -> RuleDeclaration:
    decl = declare(
        module,
        body["name"],
        stage,
        fail_closed=body["fail_closed"],
        match=body["match"] or None,
        code=text,
        priority=body["priority"],
        when=body["when"] or None,
    )
    values = {field.name: getattr(decl, field.name) for field in fields(Declaration)}
    return RuleDeclaration(**values, rule_identity=identity)


def _compile(source: str, rule: RuleText, key: str) -> Any:
    try:
        return env().compile(source)
    except RuntimeError as exc:
        text = str(exc).removeprefix("INVALID_ARGUMENT: ").strip()
        raise RuleFileError(rule.file, rule.lines.get(key, rule.line), f"{key}: {text}") from None


def _template(reason: str, rule: RuleText) -> tuple[str | Any, ...]:
    """A reason's parts: literal text and ``{{ CEL }}`` expressions over the same names as ``if``."""
    parts: list[str | Any] = []
    last = 0
    for found in _TEMPLATE.finditer(reason):
        if found.start() > last:
            parts.append(reason[last : found.start()])
        parts.append(_compile(found.group(1).strip(), rule, "then"))
        last = found.end()
    if last < len(reason):
        parts.append(reason[last:])
    return tuple(parts) or ("cancelled by a rule",)


def reads(*sources: str) -> frozenset[str]:
    """The names of NAMES the CEL texts may read: each one a text mentions anywhere (in a string literal
    too: a name left out of an activation reads as missing, so in doubt it is in)."""
    return frozenset(name for name in NAMES if any(name in source for source in sources))


def activation(
    payload: Mapping[str, Any],
    ctx: Mapping[str, Any],
    bag: Mapping[str, Any] | None,
    names: frozenset[str] = NAMES,
) -> Any:
    """The names a call's rules read (``names``: only those), made once per call.

    The binding converts a name's Python value when an expression first reads it, so a name no rule reads
    costs only its slot; one left out costs nothing at all.
    """
    data: dict[str, Any] = {}
    if "payload" in names:
        data["payload"] = payload
    if "ctx" in names:
        data["ctx"] = ctx
    if "bag" in names:
        data["bag"] = bag or {}
    return env().Activation(data)


def holds(rule: Rule, act: Any) -> bool:
    """Whether the rule's condition holds; RuntimeError (or TypeError) when it cannot be evaluated."""
    result = rule.condition.eval(act)
    value = result.value()
    if isinstance(value, bool):
        return value
    if result.type().name() == "ERROR":  # a payload CEL cannot hold (an int over 64 bits, a non-text key)
        raise RuntimeError(str(value))
    raise TypeError(f"if gave {type(value).__name__}, not a bool ({value!r:.80})")


def render(rule: Rule, act: Any) -> str:
    """The rule's cancel reason for this call; a part that cannot be evaluated reads as ``?``."""
    out = []
    for part in rule.reason:
        if isinstance(part, str):
            out.append(part)
            continue
        try:
            value = part.eval(act).plain_value()
        except RuntimeError:
            value = "?"
        out.append(value if isinstance(value, str) else orjson.dumps(value, default=str).decode())
    text = "".join(out)
    return text if len(text) <= REASON_LIMIT else text[:REASON_LIMIT] + "…"


def patched(rule: Rule, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The payload with the rule's patch applied (copies along each path; the caller's payload is untouched)."""
    assert rule.patch is not None
    out = dict(payload)
    for path, value in rule.patch["set"].items():
        *parents, last = path.split(".")
        _parent(out, parents, create=True)[last] = value  # type: ignore[index]
    for path in rule.patch["remove"]:
        *parents, last = path.split(".")
        parent = _parent(out, parents, create=False)
        if parent is not None:
            parent.pop(last, None)
    return out


def _parent(root: dict[str, Any], names: list[str], *, create: bool) -> dict[str, Any] | None:
    node = root
    for name in names:
        child = node.get(name)
        if not isinstance(child, dict):
            if not create:
                return None
            child = {}
        node[name] = child = dict(child)
        node = child
    return node
