"""The recursion-depth rule: the one place that knows it.

An event an agent originates has depth 0. Whatever runs because of an event of
depth ``d`` (a subscriber handler, the tasks it starts, a shell hook calling
``hookbus emit`` with ``HOOKBUS_DEPTH`` set, a triggered turn) emits at ``d + 1``.
Emits at or beyond the limit are dropped silently and counted.

The current depth lives in a context variable, so asyncio tasks started inside
a handler inherit it without any plumbing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from bus._core.errors import ConfigError

DEFAULT_MAX_DEPTH = 8
DEPTH_ENV = "HOOKBUS_DEPTH"

_current: ContextVar[int] = ContextVar("hookbus_depth", default=0)

#: Fast accessor for hot paths: ``current_depth()`` without a Python frame.
current_depth = _current.get


def child_depth(event_depth: int) -> int:
    """The depth of anything emitted while handling an event of ``event_depth``."""
    return event_depth + 1


def depth_problem(value: object, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:
    """Why a received depth is refused, or None: not a whole number, negative, or at/over the limit.

    Nothing runs for an event received at the limit: an honest emitter drops it
    before it is sent, so only a hostile or broken one sends it.
    """
    if type(value) is not int:
        return f"depth must be a whole number, not {type(value).__name__}"
    if value < 0:
        return f"depth {value} is negative"
    if value >= max_depth:
        return f"depth {value} is at or over the limit {max_depth}"
    return None


def set_depth(depth: int) -> None:
    """Set the depth for the current context (a handler's own task)."""
    _current.set(depth)


@contextmanager
def handling(event_depth: int) -> Iterator[int]:
    """Run a block as the handler of an event: emits inside carry depth + 1."""
    token = _current.set(child_depth(event_depth))
    try:
        yield event_depth + 1
    finally:
        _current.reset(token)


def depth_from_env(environ: dict[str, str] | None = None) -> int:
    """Read ``HOOKBUS_DEPTH`` (set by whatever started this process); 0 if unset."""
    raw = (os.environ if environ is None else environ).get(DEPTH_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{DEPTH_ENV}={raw!r} is not a whole number") from None
    if value < 0:
        raise ConfigError(f"{DEPTH_ENV}={raw!r} must not be negative")
    return value
