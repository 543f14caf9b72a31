"""Groups of journal sinks sharing one durable consumer: each entry is stored by one sink of the group.

Each sink of a group keeps its own database and its own chains (places 1, 2,
3 ... over the entries it took); its checkpoints sign the group's consumer
name as their ``sink``, so ``hookbus journal verify`` can say the journal is
one share of the group's and the others hold the rest.
"""

from __future__ import annotations

import re
from typing import Final

from bus._core.errors import ConfigError
from bus._journal.subjects import JOURNAL_DURABLE_PREFIX

#: The consumer name of a group of sinks (``hookbus journal-sink --group NAME``).
GROUP_PREFIX: Final = JOURNAL_DURABLE_PREFIX + "group-"
_GROUP_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def durable_for_group(group: str) -> str:
    """The one durable consumer the sinks of ``group`` share."""
    if not _GROUP_NAME.fullmatch(group):
        raise ConfigError(f"sink group {group!r}: letters, digits, '-' and '_' only (at most 64)")
    return GROUP_PREFIX + group


def group_of(sink: str) -> str | None:
    """The group a checkpoint's ``sink`` (a consumer name) belongs to; None for a sink of its own."""
    return sink[len(GROUP_PREFIX) :] if sink.startswith(GROUP_PREFIX) else None
