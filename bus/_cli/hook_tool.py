"""agent_os's ``hook_tool`` commands for ``hookbus test-module``: each names a point and builds its payload.

``hookbus test-module FILE user "Hello"`` runs ``user.message`` as the
reference runner asks it, and so on for every command of agent_os's
``hook_tool`` (docs/cli.md lists them); the payloads are those of
docs/stages.md, with the call's agent (``--agent``) and a turn id of ``test``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from bus._cli.options import parse_json_object
from bus._core.errors import ConfigError
from bus._core.stages import Stage

TURN: Final = "test"


def _flag(text: str, what: str) -> bool:
    if text not in ("true", "false"):
        raise ConfigError(f"{what} must be true or false, not {text!r}")
    return text == "true"


def _code(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"terminate: the exit code must be a whole number, not {text!r}") from None


Build = Callable[[str, list[str]], dict[str, Any]]

#: command -> (stage, how many arguments (least, most), usage, payload from (agent, arguments)).
COMMANDS: Final[dict[str, tuple[Stage, tuple[int, int], str, Build]]] = {
    "user": (Stage.USER_MESSAGE, (1, 1), 'user "text"', lambda a, v: {"agent": a, "turn": TURN, "content": v[0]}),
    "turn": (
        Stage.TURN_AFTER, (2, 2), 'turn "question" "answer"',
        lambda a, v: {"agent": a, "turn": TURN, "question": v[0], "answer": v[1], "rounds": 1},
    ),
    "loop": (
        Stage.LOOP_END, (0, 1), 'loop ["answer"|"suppressed"|"job_done"]',
        lambda a, v: {"agent": a, "turn": TURN, "reason": v[0] if v else "answer", "rounds": 1},
    ),
    "tool": (
        Stage.TOOL_CALL, (1, 2), "tool NAME ['{json input}']",
        lambda a, v: {"name": v[0], "input": parse_json_object(v[1], "tool input") if len(v) > 1 else {}},
    ),
    "result": (
        Stage.TOOL_RESULT, (2, 3), 'result NAME "output" [true|false]',
        lambda a, v: {"name": v[0], "output": v[1], "is_error": _flag(v[2], "is_error") if len(v) > 2 else False},
    ),
    "inference": (
        Stage.LLM_REQUEST, (0, 1), "inference ['{json request}']",
        lambda a, v: {
            "model": "", "messages": [], "tools": None, "max_tokens": None, "temperature": None, "attempt": 1,
            **(parse_json_object(v[0], "the request") if v else {}),
        },
    ),
    "token": (
        Stage.LLM_TOKEN, (1, 2), 'token "chunk" [true|false]',
        lambda a, v: {
            "agent": a, "turn": TURN, "text": v[0], "index": 0, "replace": False,
            "final_answer": _flag(v[1], "final_answer") if len(v) > 1 else True,
        },
    ),
    "evict": (
        Stage.CONTEXT_EVICT, (0, 1), 'evict ["summary"]',
        lambda a, v: {"agent": a, "turn": TURN, "evicted": [], "summary": v[0] if v else "", "tokens": 0,
                      "window_tokens": 0},
    ),
    "spawn": (Stage.AGENT_SPAWN, (0, 0), "spawn", lambda a, v: {"agent": a, "turn": TURN, "trigger": None, "depth": 0}),
    "terminate": (
        Stage.AGENT_TERMINATE, (0, 1), "terminate [EXIT_CODE]",
        lambda a, v: {
            "agent": a, "turn": TURN, "success": (code := _code(v[0]) if v else 0) == 0,
            "error": None if code == 0 else f"exit code {code}",
        },
    ),
    "error": (
        Stage.AGENT_ERROR, (1, 1), 'error "message"',
        lambda a, v: {"agent": a, "turn": TURN, "error": v[0], "component": "agent"},
    ),
}  # fmt: skip


def call(command: str, arguments: list[str], agent: str | None) -> tuple[str, dict[str, Any]]:
    """(stage, payload) for ``command`` and its arguments; ConfigError with its usage for the wrong count."""
    stage, (least, most), usage, build = COMMANDS[command]
    if not least <= len(arguments) <= most:
        raise ConfigError(f"usage: hookbus test-module FILE {usage}")
    return stage.value, build(agent or "test-agent", arguments)
