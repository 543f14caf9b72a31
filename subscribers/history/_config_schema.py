"""history.yaml as a type: what ``hookbus up`` records when ``--record`` is not given, and its limits."""

from __future__ import annotations

import msgspec

from bus._runtime.config_types import NonEmpty


class HistoryFile(msgspec.Struct, forbid_unknown_fields=True):
    """<workspace>/history.yaml: what ``hookbus up`` records when ``--record`` is not given, and its limits."""

    record: list[NonEmpty]
    max_age: NonEmpty | None = None  # a duration like 7d, 12h (None: the default)
    max_bytes: NonEmpty | None = None  # a size like 1GiB, 500MB (None: the default)
