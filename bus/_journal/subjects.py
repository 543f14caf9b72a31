"""The journal's subjects, stream and durable names."""

from __future__ import annotations

#: Journal entries go to ``hookbus.journal.<kind>[.<origin>]``, kept by the stream JOURNAL_STREAM.
JOURNAL_PREFIX = "hookbus.journal"
JOURNAL_STREAM = "HOOKBUS_JOURNAL"
#: A journal sink's durable consumer is this prefix plus a hash of where it stores.
JOURNAL_DURABLE_PREFIX = "hookbus-journal-"
