"""Instances a call found absent (NATS's no-responders), and the probe that finds them back.

The kernel drops such an instance from its view at once (a held guard holds
from the next call) and remembers its announcement and revision here: the
same revision delivered again (a restarted watch) does not bring it back, a
newer put does. A probe asks the instance's request subject with an empty
request (a live module answers it as malformed), after a pause that doubles
up to a bound, until someone answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from bus._core.errors import HookbusError, NoResponders, RequestTimeout
from bus._middleware.registry import Announcement
from bus._transport.port import Port

#: The first and the longest pause between probes (it may only have been reconnecting, or its interest not
#: yet routed to this kernel's server).
PROBE_FIRST_S: Final = 0.5
PROBE_MAX_S: Final = 60.0
#: How long one probe waits for an answer.
PROBE_TIMEOUT_S: Final = 2.0
#: Instances remembered as absent at once; beyond it the oldest is no longer remembered (its key expires anyway).
MAX_ABSENT: Final = 4096


class Absences:
    """Registry key -> (announcement, revision) of each instance a call found absent."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[Announcement, int]] = {}

    def add(self, key: str, ann: Announcement, revision: int) -> None:
        if len(self.known) >= MAX_ABSENT:
            self.known.pop(next(iter(self.known)))
        self.known[key] = (ann, revision)

    def still_absent(self, key: str, revision: int) -> bool:
        """For a put delivered under ``key``: True if it is the one found absent (ignore it); False (and
        forgotten here) if it is newer, or the key was never absent."""
        found = self.known.get(key)
        if found is None:
            return False
        if revision <= found[1]:
            return True
        del self.known[key]
        return False

    def discard(self, key: str) -> None:
        self.known.pop(key, None)


async def probe(port: Port, subject: str, wanted: Callable[[], bool]) -> bool:
    """Ask ``subject`` until someone answers (True), or until ``wanted()`` turns False (False)."""
    pause = PROBE_FIRST_S
    while wanted():
        await asyncio.sleep(pause)
        pause = min(pause * 2, PROBE_MAX_S)
        if not port.connected or not wanted():
            continue
        try:
            await port.request_raw(subject, b"", PROBE_TIMEOUT_S)
        except (NoResponders, RequestTimeout, HookbusError, OSError):
            continue
        return True
    return False
