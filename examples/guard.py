"""A middleware module that cancels ``rm -rf`` in shell tool calls (the README's guard).

Serve it with ``hookbus serve examples/guard.py``; approve it with ``hookbus approve guard.no_rm``.
An agent asks with ``await bus.intercept(Stage.TOOL_CALL, {"name": "shell", "input": {"command": ...}})``.
"""

from bus import Cancel, Continue, Module, Stage

module = Module("guard")


@module.stage(Stage.TOOL_CALL, fail_closed=True, match="shell")
async def no_rm(stage: str, payload: dict) -> Cancel | Continue:
    if "rm -rf" in payload.get("input", {}).get("command", ""):
        return Cancel("only by hand")
    return Continue()
