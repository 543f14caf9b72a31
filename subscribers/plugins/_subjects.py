"""The JetStream API subjects a plugin's host services ask directly."""

from __future__ import annotations

#: JetStream API subjects a plugin's host services ask directly (its bucket's stream, made with a size cap).
JS_API_STREAM_CREATE = "$JS.API.STREAM.CREATE."
JS_API_STREAM_INFO = "$JS.API.STREAM.INFO."
