"""``Module``: a named set of stage handlers, served as one middleware module on the bus.

``Module(name)`` collects handlers with ``@module.stage(...)`` (the
declaring and answering is :class:`bus._middleware.handler.module.Handlers`);
``await module.serve(servers)`` announces them and answers the kernel's
requests until cancelled, on a Bus of its own or on one given.
"""

from __future__ import annotations

import asyncio

from bus._client import Bus
from bus._middleware.handler.module import Handlers
from bus._middleware.handler.serving import ModuleServer
from bus._middleware.registry import check_handler_count


class Module(Handlers):
    """A named set of stage handlers, served as one middleware module."""

    async def serve(
        self,
        servers: str | list[str] | None = None,
        *,
        bus: Bus | None = None,
        ready: asyncio.Event | None = None,
        detach_on_stop: bool = False,
    ) -> None:
        """Announce the handlers and answer requests until cancelled.

        ``servers`` as for :class:`bus.Bus`; or pass an open ``bus`` to share
        its connection. ``ready`` is set once requests are being answered.
        A fail-closed handler keeps guarding after its module stops, until an
        operator detaches it; ``detach_on_stop=True`` (a demo, a test) detaches
        it when this process stops cleanly.
        """
        check_handler_count(self.name, len(self.declarations))
        if bus is not None:
            await ModuleServer(self, bus, detach_on_stop=detach_on_stop).run(ready)
            return
        async with Bus(servers, name=f"hookbus-module-{self.name}") as own:
            await ModuleServer(self, own, detach_on_stop=detach_on_stop).run(ready)
