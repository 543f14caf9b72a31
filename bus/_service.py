"""What ``hookbus up`` hands each service it composes, and the shape of a service.

Services (the shell-hook worker, the journal sink, agent metrics, triggers)
live in ``subscribers/`` and ``triggers/``; they take this context and their
own typed settings, never the command line's parsed flags.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from bus._client import Bus

#: Makes a Bus named ``name`` with the settings and credentials of the command that runs the services.
Connector = Callable[[str], Bus]


@dataclass
class ServiceContext:
    """The shared part of every service's start: the bus, the workspace, the NATS URL hooks are given."""

    bus: Bus
    workspace: Path
    nats_url: str
    #: A new, unopened Bus to the same server with the same settings and credentials, named for its use:
    #: for a service whose backlog must not cost the shared connection its messages (a slow-consumer cut).
    connect: Connector
    #: Lines printed once everything is up ("  name  where it listens"); each service adds its own.
    lines: list[str] = field(default_factory=list)


#: A service: an async context manager that runs while the bus is up.
Service = Callable[[ServiceContext], AbstractAsyncContextManager[None]]
