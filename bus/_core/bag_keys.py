"""The bag's standard keys (agent_os's ``bag_keys``) and the built-in fallback each has when nobody wrote it.

A handler's input resolves as agent_os resolves it: the value in the bag,
else the input's literal ``default``, else the key's built-in fallback, read
from the call's own payload (a producer is optional: ``retrieval.query``
without a query rewriter is the user's raw message).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from bus._core.declaration import Declaration

RETRIEVAL_QUERY: Final = "retrieval.query"
RETRIEVAL_SOURCE: Final = "retrieval.source"
INTENT_LABEL: Final = "intent.label"
LANG_USER: Final = "lang.user"
MODEL_ROUTE: Final = "model.route"
STANDARD_KEYS: Final = (RETRIEVAL_QUERY, RETRIEVAL_SOURCE, INTENT_LABEL, LANG_USER, MODEL_ROUTE)


def _text(payload: Mapping[str, Any]) -> Any:
    """The user's words: ``text`` or ``content`` of user.message, ``prompt`` of a turn."""
    for field in ("text", "content", "prompt"):
        value = payload.get(field)
        if isinstance(value, str):
            return value
    return None


def _model(payload: Mapping[str, Any]) -> Any:
    value = payload.get("model")
    return value if isinstance(value, str) else None


#: Per standard key, its built-in fallback from the payload (None where agent_os has none: a label, a
#: language or a source nobody produced is unknown, not guessed).
FALLBACKS: Final[dict[str, Callable[[Mapping[str, Any]], Any]]] = {
    RETRIEVAL_QUERY: _text,
    MODEL_ROUTE: _model,
}


def resolve(key: str, bag: Mapping[str, Any], default: Any, payload: Mapping[str, Any]) -> Any:
    """An input's value: the bag's, else its literal default, else the key's built-in fallback (else None)."""
    if key in bag:
        return bag[key]
    if default is not None:
        return default
    fallback = FALLBACKS.get(key)
    return None if fallback is None else fallback(payload)


def inputs(decl: Declaration, bag: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """``ctx.inputs`` of ``decl``: each declared input by its port name, resolved as :func:`resolve` says."""
    return {item.name: resolve(item.key, bag, item.default, payload) for item in decl.inputs}
