"""The JSON-RPC messages the proxy writes itself: errors, refused tool results, and a tool result's text."""

from __future__ import annotations

from typing import Any, Final

from mcp.shared.message import SessionMessage
from mcp_types import ErrorData, JSONRPCError, JSONRPCResponse, RequestId

#: JSON-RPC codes: invalid params (a malformed tools/call), and the server-error range the proxy answers with.
INVALID_PARAMS: Final = -32602
UPSTREAM_ERROR: Final = -32000
REFUSED: Final = -32001
#: The method of the stand-in request an oversized client message becomes; the proxy answers it with an error.
OVERSIZED: Final = "hookbus/oversized"
#: A tool's name on the bus: Claude Code's naming, so its matchers and the bus's agree.
TOOL_NAME: Final = "mcp__{server}__{tool}"


def tool_name(server: str, tool: str) -> str:
    return TOOL_NAME.format(server=server, tool=tool)


def error(request_id: RequestId, code: int, message: str) -> SessionMessage:
    """A JSON-RPC error answering ``request_id``."""
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message)))


def response(request_id: RequestId, result: dict[str, Any]) -> SessionMessage:
    return SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result))


def text_result(text: str, *, is_error: bool) -> dict[str, Any]:
    """A ``tools/call`` result of one text block (a refusal is ``isError``, as the client shows a failed tool)."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def result_text(result: dict[str, Any]) -> str:
    """The text ``tool.result`` judges: the text blocks joined, other blocks as their type."""
    parts: list[str] = []
    content = result.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type', 'block')}]")
    return "\n".join(parts)
