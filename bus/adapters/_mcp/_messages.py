"""The JSON-RPC messages the proxy writes itself: errors, refused tool results, and a tool result's text."""

from __future__ import annotations

from typing import Any, Final

import orjson
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


def rewritten(result: dict[str, Any], before: str, text: str, *, hidden: bool) -> dict[str, Any]:
    """``result`` with its output replaced by ``text`` (a ``tool.result`` patch), or hidden behind it (a cancel).

    Structured content goes too, so what was redacted does not stay in it: a patch whose text is a JSON object
    becomes the structured content; a field that held the whole old text holds the new one; otherwise (and
    for hidden output) the result is marked ``isError``, which clients do not check against the tool's schema.
    """
    kept = {k: v for k, v in result.items() if k not in ("content", "structuredContent", "isError")}
    is_error = bool(result.get("isError")) or hidden
    structured = result.get("structuredContent")
    if structured is None or hidden:
        return {**kept, **text_result(text, is_error=is_error)}
    replaced = _structured(structured, before, text)
    if replaced is None:
        return {**kept, **text_result(text, is_error=True)}
    return {**kept, **text_result(text, is_error=is_error), "structuredContent": replaced}


def _structured(structured: Any, before: str, text: str) -> dict[str, Any] | None:
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    if isinstance(structured, dict) and any(v == before for v in structured.values()):
        return {k: text if v == before else v for k, v in structured.items()}
    return None
