"""Reading a rule file: YAML with line numbers, into normalised rule texts (one dict per rule).

A file is ``rules:`` (a list) and optional ``global:`` (default true). Each rule
is checked field by field; any fault refuses the whole file with the file, the
line and the reason, so a kernel keeps the last good version it had. The
normalised text of a rule (sorted JSON of its checked fields) is what its
identity hashes and what a trust record keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from bus._core.stages import Stage
from bus._core.subjects import TOKEN_RE
from bus._middleware.rules.errors import RuleFileError

#: agent_os's ``hook_tool`` shorthands for the common stages.
SHORTHANDS: Final = {
    "tool": Stage.TOOL_CALL.value,
    "result": Stage.TOOL_RESULT.value,
    "user": Stage.USER_MESSAGE.value,
    "inference": Stage.LLM_REQUEST.value,
    "token": Stage.LLM_TOKEN.value,
    "evict": Stage.CONTEXT_EVICT.value,
    "assistant": Stage.ASSISTANT_MESSAGE.value,
    "memory": Stage.MEMORY_SAVE.value,
}
RULE_FIELDS: Final = frozenset(
    {"name", "stage", "match", "when", "if", "then", "reason", "priority", "enabled", "fail_closed", "mode"}
    | {"cedar", "default"}  # a Cedar rule (bus._middleware.rules.cedar): policies instead of if
)
FILE_FIELDS: Final = frozenset({"rules", "global"})
MODES: Final = ("enforce", "shadow")
#: Rules one file may hold, and bytes one file may have (a kernel reads files others wrote).
MAX_RULES: Final = 1000
MAX_BYTES: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class RuleText:
    """One rule as read: its normalised fields, and where it stands in its file."""

    fields: dict[str, Any]
    file: str
    line: int
    lines: Mapping[str, int]  # field -> line, for the compiler's messages


@dataclass(frozen=True, slots=True)
class RuleFile:
    """A checked rule file: its stem (the rules' module name) and its rules."""

    stem: str
    rules: tuple[RuleText, ...]
    is_global: bool = True


def stem_of(path: str | Path) -> str:
    """The module name of a file's rules (``rules/guards.yaml``: ``guards``); RuleFileError if not a token."""
    stem = Path(path).stem
    if not TOKEN_RE.fullmatch(stem):
        raise RuleFileError(str(path), 1, f"the file name {stem!r} must match [A-Za-z0-9_-]+ (it names its rules)")
    return stem


def read_path(path: str | Path) -> RuleFile:
    """Read and check a rule file from disk."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleFileError(str(path), 1, f"cannot read it: {exc}") from None
    return parse(text, str(path), stem_of(path))


def parse(text: str, file: str, stem: str) -> RuleFile:
    """Check a rule file's text; RuleFileError(file, line, reason) for the first fault."""
    if len(text.encode()) > MAX_BYTES:
        raise RuleFileError(file, 1, f"over {MAX_BYTES} bytes")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise RuleFileError(file, mark.line + 1 if mark else 1, f"not YAML: {exc}") from None
    if data is None:
        return RuleFile(stem, ())
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise RuleFileError(file, 1, "a rule file is a mapping with a 'rules:' list")
    keys = _key_lines(root)
    for key in data:
        if key not in FILE_FIELDS:
            raise RuleFileError(file, keys.get(str(key), 1), f"unknown field {key!r} (known: global, rules)")
    is_global = data.get("global", True)
    if not isinstance(is_global, bool):
        raise RuleFileError(file, keys.get("global", 1), "global must be true or false")
    items = data.get("rules") or []
    node = _value_node(root, "rules")
    if not isinstance(items, list) or not isinstance(node, yaml.SequenceNode | yaml.ScalarNode):
        raise RuleFileError(file, keys.get("rules", 1), "rules must be a list")
    if len(items) > MAX_RULES:
        raise RuleFileError(file, keys.get("rules", 1), f"over {MAX_RULES} rules")
    rules: list[RuleText] = []
    seen: dict[str, int] = {}
    nodes = node.value if isinstance(node, yaml.SequenceNode) else []
    for item, item_node in zip(items, nodes, strict=True):
        line = item_node.start_mark.line + 1
        lines = _key_lines(item_node) if isinstance(item_node, yaml.MappingNode) else {}
        rule = RuleText(_check(item, file, line, lines), file, line, lines)
        name = rule.fields["name"]
        if name in seen:
            raise RuleFileError(file, line, f"rule {name!r} is defined twice (first at line {seen[name]})")
        seen[name] = line
        rules.append(rule)
    return RuleFile(stem, tuple(rules), is_global)


def _key_lines(node: yaml.Node) -> dict[str, int]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(key.value): key.start_mark.line + 1 for key, _ in node.value}


def _value_node(node: yaml.MappingNode, name: str) -> yaml.Node | None:
    return next((value for key, value in node.value if key.value == name), None)


def _check(item: Any, file: str, line: int, lines: Mapping[str, int]) -> dict[str, Any]:
    """A rule's fields, normalised; RuleFileError for an unknown field or a wrong value."""
    if not isinstance(item, dict):
        raise RuleFileError(file, line, "each rule is a mapping (name, stage, if, then ...)")

    def fault(key: str, reason: str) -> RuleFileError:
        return RuleFileError(file, lines.get(key, line), reason)

    for key in item:
        if key not in RULE_FIELDS:
            raise fault(str(key), f"unknown field {key!r} (known: {', '.join(sorted(RULE_FIELDS))})")
    name = item.get("name")
    if not isinstance(name, str) or not TOKEN_RE.fullmatch(name):
        raise fault("name", "name must match [A-Za-z0-9_-]+")
    out: dict[str, Any] = {"name": name, "stage": _stages(item.get("stage"), fault)}
    out["match"] = _names(item.get("match"), "match", fault)
    out["when"] = _when(item.get("when"), fault)
    if "cedar" in item:
        out.update(_cedar(item, fault))
    else:
        if "default" in item:
            raise fault("default", "default (allow or deny) is for cedar rules")
        condition = item.get("if", "true")
        if not isinstance(condition, str) or not condition.strip():
            raise fault("if", "if must be a CEL expression (text)")
        out["if"] = condition.strip()
        out["then"] = _then(item.get("then", "continue"), item.get("reason"), fault)
    priority = item.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > 1_000_000:
        raise fault("priority", "priority must be an integer from -1000000 to 1000000")
    out["priority"] = priority
    for flag, default in (("enabled", True), ("fail_closed", False)):
        value = item.get(flag, default)
        if not isinstance(value, bool):
            raise fault(flag, f"{flag} must be true or false")
        out[flag] = value
    mode = item.get("mode", "enforce")
    if mode not in MODES:
        raise fault("mode", f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    out["mode"] = mode
    return out


def _cedar(item: Mapping[str, Any], fault: Any) -> dict[str, Any]:
    """A Cedar rule's fields (docs/rules.md): its policies, its default, and a cancel or ask when Cedar denies."""
    if "if" in item:
        raise fault("if", "a rule has if (CEL) or cedar (policies), not both")
    policies = item["cedar"]
    if not isinstance(policies, str) or not policies.strip():
        raise fault("cedar", "cedar must be Cedar policy text (permit/forbid statements)")
    default = item.get("default", "deny")
    if default not in ("deny", "allow"):
        raise fault("default", f"default must be deny or allow, not {default!r}")
    then = item.get("then", "cancel")
    if then not in ("cancel", "ask") and not (isinstance(then, dict) and set(then) <= {"cancel", "ask"}):
        raise fault("then", "a cedar rule's then is cancel or ask (what a denied call gets)")
    reason = item.get("reason", "forbidden by a Cedar policy")
    return {"cedar": policies.strip(), "default": default, "then": _then(then, reason, fault)}


def _stages(value: Any, fault: Any) -> list[str]:
    stages = value if isinstance(value, list) else [value]
    if not stages or not all(isinstance(stage, str) and stage for stage in stages):
        raise fault("stage", "stage must be a stage name or a list of them")
    out: list[str] = []
    for stage in stages:
        full = str(SHORTHANDS.get(stage, stage))
        if not all(TOKEN_RE.fullmatch(token) for token in full.split(".")):
            raise fault("stage", f"stage {stage!r} is not a valid stage name")
        out.append(full)
    return sorted(set(out))


def _names(value: Any, key: str, fault: Any) -> list[str]:
    if value is None:
        return []
    names = value if isinstance(value, list) else [value]
    if not all(isinstance(name, str) and name for name in names):
        raise fault(key, f"{key} must be a name or a list of names")
    return sorted(set(names))


def _when(value: Any, fault: Any) -> dict[str, list[str]]:
    if value is None:
        return {}
    fields = ("agents", "users", "sessions", "templates")
    if not isinstance(value, dict) or any(key not in fields for key in value):
        raise fault("when", f"when must be a mapping of {', '.join(fields)}")
    return {key: _names(value[key], "when", fault) for key in fields if value.get(key) is not None}


def _then(value: Any, reason: Any, fault: Any) -> dict[str, Any]:
    """``continue``; ``cancel`` or ``ask`` (with ``reason``), ``{cancel|ask: REASON}``; ``{patch: {set:, remove:}}``."""
    if value == "continue":
        return {"continue": True}
    if value in ("cancel", "ask"):
        default = "cancelled by a rule" if value == "cancel" else "a rule asks an operator"
        value = {value: reason if reason is not None else default}
    if not isinstance(value, dict) or len(value) != 1:
        raise fault("then", "then must be continue, cancel, ask, {cancel|ask: REASON} or {patch: {set:, remove:}}")
    ((kind, body),) = value.items()
    if kind in ("cancel", "ask"):
        if not isinstance(body, str) or not body:
            raise fault("then", f"a{'n' if kind == 'ask' else ''} {kind}'s reason must be text")
        return {kind: body}
    if kind != "patch" or not isinstance(body, dict) or any(key not in ("set", "remove") for key in body):
        raise fault("then", "then's patch is {set: {PATH: VALUE}, remove: [PATH]}")
    sets, removes = body.get("set") or {}, body.get("remove") or []
    if not isinstance(sets, dict) or not isinstance(removes, list):
        raise fault("then", "patch set is a mapping of paths to values, remove a list of paths")
    for path in [*sets, *removes]:
        if not isinstance(path, str) or not all(path.split(".")):
            raise fault("then", f"patch path {path!r} must be dotted names (input.command)")
    if not sets and not removes:
        raise fault("then", "a patch must set or remove something")
    return {"patch": {"set": dict(sorted(sets.items())), "remove": sorted(set(removes))}}
