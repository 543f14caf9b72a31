"""The runner's context window: approximate token counts and which messages leave first.

Tokens are counted approximately, four characters of a message's JSON each
(no tokenizer is bundled; a model's own limit is checked by the model). When
the messages of a turn outgrow the window, whole exchanges leave oldest first
(an assistant message with tool calls goes with its tool results, so the
model never sees an orphan result); the leading system prompt and the newest
exchange always stay. What leaves is replaced by one summary message.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

#: Characters per token in the approximate count.
CHARS_PER_TOKEN: Final = 4
#: The summary message's text starts with this, so the runner finds (and replaces) it.
SUMMARY_PREFIX: Final = "Summary of the earlier conversation: "


def tokens(messages: list[dict[str, Any]]) -> int:
    """The approximate token count of ``messages``."""
    return sum(len(orjson.dumps(message)) for message in messages) // CHARS_PER_TOKEN + 1


def _exchanges(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Messages grouped so that each group can leave on its own (tool results stay with their call)."""
    groups: list[list[dict[str, Any]]] = []
    for message in messages:
        if message.get("role") == "tool" and groups:
            groups[-1].append(message)
        else:
            groups.append([message])
    return groups


def split(messages: list[dict[str, Any]], window: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(head kept first, evicted) for a window of ``window`` tokens; nothing evicted when it fits.

    The head is the leading system prompt (a previous summary is evicted again
    and folded into the next one by the caller); the rest of the kept messages
    are ``messages`` after the head and the evicted ones.
    """
    if tokens(messages) <= window:
        return [], []
    head = 1 if messages and messages[0].get("role") == "system" and not is_summary(messages[0]) else 0
    groups = _exchanges(messages[head:])
    evicted: list[dict[str, Any]] = []
    kept_tokens = tokens(messages)
    while len(groups) > 1 and kept_tokens > window:
        group = groups.pop(0)
        evicted.extend(group)
        kept_tokens -= tokens(group) - 1
    return messages[:head], evicted


def is_summary(message: dict[str, Any]) -> bool:
    """Whether ``message`` is a summary this module wrote."""
    content = message.get("content")
    return message.get("role") == "system" and isinstance(content, str) and content.startswith(SUMMARY_PREFIX)


def summary_message(summary: str) -> dict[str, Any]:
    """The message that stands for the evicted ones."""
    return {"role": "system", "content": SUMMARY_PREFIX + summary}
