"""OpenTelemetry for hookbus: spans where the process traces, and the W3C trace context they send on.

Events and middleware requests may carry a W3C ``traceparent``
(``00-<trace id>-<span id>-<flags>``, docs/protocol.md). A process that uses
OpenTelemetry (it imported ``opentelemetry.trace``, as configuring a tracer
provider does) gets spans for intercepts, handler calls, shell-hook runs and
triggered turns, children of the caller's current span or of the received
``traceparent``. A process that does not pays nothing: hookbus never imports
OpenTelemetry itself, each use is one dictionary lookup, and
``HOOKBUS_OTEL=off`` turns it off even where OpenTelemetry is loaded.

A received ``traceparent`` that is not valid W3C (:mod:`bus._core.traceparent`)
is ignored: the span starts a trace of its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from typing import Any, Final

from bus._core.traceparent import valid_traceparent

#: ``HOOKBUS_OTEL=off`` (or ``0``, ``false``, ``no``): no spans and no trace context sent, even with OpenTelemetry.
OTEL_ENV: Final = "HOOKBUS_OTEL"
_OFF: Final = os.environ.get(OTEL_ENV, "").strip().lower() in ("off", "0", "false", "no")
#: What :func:`span` returns where the process does not trace; hot paths use it without building a span's name.
NO_SPAN: Final = contextlib.nullcontext(None)

Attributes = Mapping[str, str | int | float | bool]


#: Span attribute names (OpenTelemetry's dotted namespaces, not subjects): the one place they are spelled.
ATTR_STAGE: Final = "hookbus.stage"
ATTR_HANDLER: Final = "hookbus.handler"
ATTR_OUTCOME: Final = "hookbus.outcome"
ATTR_DECISION: Final = "hookbus.decision"
ATTR_AGENT: Final = "hookbus.agent"
ATTR_TURN: Final = "hookbus.turn"
ATTR_TRIGGER: Final = "hookbus.trigger"
ATTR_EVENT: Final = "hookbus.event"
ATTR_HOOK: Final = "hookbus.hook"


def _trace() -> Any:
    """``opentelemetry.trace`` when this process already uses it, else None (never imported here)."""
    return None if _OFF else sys.modules.get("opentelemetry.trace")


def active() -> bool:
    """Whether this process traces (spans and trace context cost nothing when it does not)."""
    return _trace() is not None


def current_traceparent() -> str | None:
    """The traceparent of this context's current span, to send on; None without a valid one."""
    trace = _trace()
    if trace is None:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _remote_parent(trace: Any, traceparent: str) -> Any:
    """An OpenTelemetry context whose current span is the sender's (remote) span."""
    _, trace_id, span_id, flags = traceparent.split("-")
    span_context = trace.SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16)),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def span(
    name: str, *, parent: object = None, attributes: Attributes | None = None, kind: str = "INTERNAL"
) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name`` for the block (the span, or None where the process does not trace).

    ``parent``: a received traceparent; valid, the span continues that trace,
    otherwise it is a child of the current span. ``kind``: an OpenTelemetry
    ``SpanKind`` name (``CLIENT`` for an intercept, ``SERVER`` for a handler call).
    """
    trace = _trace()
    if trace is None:
        return NO_SPAN
    remote = valid_traceparent(parent)
    context = _remote_parent(trace, remote) if remote is not None else None
    tracer = trace.get_tracer("hookbus")
    started: contextlib.AbstractContextManager[Any] = tracer.start_as_current_span(
        name, context=context, kind=getattr(trace.SpanKind, kind), attributes=dict(attributes or {})
    )
    return started


def note(span_or_none: Any, key: str, value: str | int | float | bool) -> None:
    """Set an attribute on a span from :func:`span` (nothing when the process does not trace)."""
    if span_or_none is not None:
        span_or_none.set_attribute(key, value)


def pass_to_child(environ: dict[str, str], traceparent: object = None) -> None:
    """Set ``TRACEPARENT`` (the W3C variable) for a child process: the current span's, else ``traceparent``'s."""
    value = current_traceparent() or valid_traceparent(traceparent)
    if value is not None:
        environ["TRACEPARENT"] = value
