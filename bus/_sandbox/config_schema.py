"""The sandbox's settings as a file gives them (hooks.json's and a plugin manifest's ``isolation``)."""

from __future__ import annotations

from typing import Annotated

import msgspec


class Isolation(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """How a process the bus starts is fenced in (bubblewrap namespaces plus rlimits): see docs/security.md.

    Given at all, it means isolated: no network unless ``network`` is true, a
    read-only file system but for the working directory, private /proc and PID
    namespace, and the three limits below.
    """

    network: bool = False
    memory_mb: Annotated[int, msgspec.Meta(ge=16, le=1 << 20)] = 512  # address space (RLIMIT_AS)
    cpu_s: Annotated[int, msgspec.Meta(ge=1, le=24 * 3600)] = 60  # CPU time (RLIMIT_CPU)
    max_procs: Annotated[int, msgspec.Meta(ge=4, le=65536)] = 64  # processes of the sandbox's user (RLIMIT_NPROC)


#: ``isolation`` in hooks.json: ``true`` (the defaults), ``false`` (off, over the file's default), or the settings.
IsolationField = Isolation | bool | None
