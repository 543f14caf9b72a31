"""Cedar policies as a second kind of rule (the ``cedar`` extra, ``cedarpy``): which agent may do what, on what.

A rule with ``cedar:`` instead of ``if:`` holds Cedar policy text. Each call it
takes is one Cedar request: principal ``Agent::"<ctx agent>"``, action
``Action::"<tool name>"`` on tool stages (``Action::"<stage>"`` on the
others), resource ``Resource::"<target>"`` (on tool stages the input's
``path``, ``file_path``, ``url`` or ``command``, the first that is text, else
the tool's name; elsewhere the stage), and a context of ``stage``, ``user``,
``session``, ``template``, ``tool`` and ``target`` (the resource's id as text,
for ``like``: ``when { context.target like "/etc/*" }``). Cedar's own semantics decide: a
matching ``forbid`` wins over any ``permit``; with no policy matching, the
rule's ``default`` decides (``deny``, Cedar's, unless ``default: allow``).
A denied call is the rule's condition holding: its ``then`` is a cancel (or
an ask). A policy that errors on a call fails the rule (its fail mode reads),
never lets it through silently. Policies are parsed once, at load; a file
whose policies do not parse is refused with its line, as any rule file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from bus._core.errors import ConfigError
from bus._core.stages import Stage
from bus._middleware.rules.errors import RuleFileError

_TOOL_STAGES: Final = frozenset({Stage.TOOL_CALL.value, Stage.TOOL_RESULT.value})
#: The input fields read, in order, for a tool call's resource.
TARGET_FIELDS: Final = ("path", "file_path", "url", "command")
DEFAULTS: Final = ("deny", "allow")


def _cedarpy() -> Any:
    try:
        import cedarpy
    except ImportError:
        raise ConfigError("Cedar rules need cedarpy: pip install 'hookbus[cedar]'") from None
    return cedarpy


@dataclass(frozen=True, slots=True, eq=False)
class CedarCheck:
    """A rule's parsed policies and its default; :meth:`denies` answers one call."""

    policies: Any  # cedarpy.PolicySet
    allow_by_default: bool
    entities: Any  # cedarpy.Entities (none: the request's uids stand alone)

    def denies(self, ctx: Mapping[str, str], payload: Mapping[str, Any]) -> bool:
        """Whether Cedar denies this call; RuntimeError when a policy cannot be evaluated on it."""
        cedarpy = _cedarpy()
        result = cedarpy.is_authorized(request(ctx, payload), self.policies, self.entities)
        errors = list(result.diagnostics.errors)
        if errors:
            raise RuntimeError(f"a Cedar policy could not be evaluated: {str(errors[0])[:300]}")
        if result.allowed:
            return False
        matched = list(result.diagnostics.reasons)  # the forbids that matched; none: nothing matched
        return bool(matched) or not self.allow_by_default


def check(text: str, default: str, file: str, line: int) -> CedarCheck:
    """Parse a rule's policies once; RuleFileError (file, line, Cedar's reason) when they do not parse."""
    cedarpy = _cedarpy()
    try:
        policies = cedarpy.PolicySet.from_str(text)
    except ValueError as exc:
        raise RuleFileError(file, line, f"cedar: the policies do not parse: {exc}") from None
    return CedarCheck(policies, default == "allow", cedarpy.Entities.from_json_str("[]"))


def request(ctx: Mapping[str, str], payload: Mapping[str, Any]) -> dict[str, Any]:
    """The Cedar request of one call (principal, action, resource, context), as the module docstring says."""
    stage = ctx.get("stage", "")
    tool = payload.get("name") if stage in _TOOL_STAGES else None
    tool = tool if isinstance(tool, str) else ""
    target = stage
    if stage in _TOOL_STAGES:
        data = payload.get("input")
        found = [data.get(key) for key in TARGET_FIELDS] if isinstance(data, Mapping) else []
        target = next((value for value in found if isinstance(value, str)), tool)
    return {
        "principal": {"type": "Agent", "id": ctx.get("agent", "")},
        "action": {"type": "Action", "id": tool or stage},
        "resource": {"type": "Resource", "id": target},
        "context": {name: ctx.get(name, "") for name in ("stage", "user", "session", "template")}
        | {"tool": tool, "target": target},
    }
