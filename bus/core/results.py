"""How a decision changes the payload: patch composition and the tool.result rules.

On tool.result the veto acts on the output, not on the action: a cancel hides
the output from the model behind a note with the reason, and a patch carrying
``"remark"`` keeps the output wrapped with the handler's text. Both the module
(composing its own sub-chain) and the kernel use :func:`apply_patch`, so the
rule lives here only.
"""

from __future__ import annotations

from typing import Any, Final

from bus.core.stages import Stage

#: The key a tool.result patch uses to remark on the output without replacing it.
REMARK: Final = "remark"


def apply_patch(stage: str, patched: dict[str, Any], handler: str) -> dict[str, Any]:
    """The payload a patch leaves for the next handler (tool.result remarks wrapped)."""
    if stage != Stage.TOOL_RESULT or not isinstance(patched.get(REMARK), str):
        return patched
    out = dict(patched)
    remark = out.pop(REMARK)
    out["output"] = wrap_output(str(out.get("output", "")), remark, handler)
    return out


def wrap_output(output: str, remark: str, handler: str) -> str:
    """The original output, kept whole, wrapped with a handler's remark."""
    return f"{output}\n\n[hookbus: remark from {handler}]\n{remark}"


def hide_output(payload: dict[str, Any], reason: str, handler: str) -> dict[str, Any]:
    """A tool.result payload whose output the model must not see: replaced by the reason."""
    return {**payload, "output": f"[hookbus: output hidden by {handler}: {reason}]", "hidden": True}
