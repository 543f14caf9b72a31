"""``TestBus``: a Bus on an in-process broker, for testing handlers without a nats-server.

``TestBus`` is :class:`bus.Bus` with one step replaced: instead of connecting
to NATS it attaches to an :class:`bus.testing._broker.InProcessBroker`, whose
client is a :class:`bus._transport.port.Connection` like the real one. Every
rule runs as it does in production, from the same code: the envelope encoder
and every receive check, the depth rule, PRX-style patterns and queue groups,
the middleware kernel (its view of the registry, chain order, fail modes,
patch composition, journal), module serving and turns. What it does not
have: other processes, permissions, TLS, reconnects and JetStream streams
(the journal's reactions are published, and kept only if something
subscribes to them). Where it differs on purpose: a queue group hands
events to its members in turn (NATS picks at random), and ``flush`` also
waits until subscribers have been handed what was sent. Module heartbeats
and handler timeouts are the same asyncio timers as in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from bus._bulk import BulkLine
from bus._client import Bus
from bus._core import depth as _depth
from bus._core.envelope import DEFAULT_MAX_BYTES
from bus._middleware.kernel.intercept import MiddlewareOptions
from bus._module import Module
from bus._transport.port import Connection
from bus.testing._broker import InProcessBroker

#: How long ``serve`` waits for the kernel to see a module's handlers (in-process: at once, in practice).
SERVE_TIMEOUT = 10.0


class TestBus(Bus):
    """An in-process Bus: ``emit``, ``subscribe``, ``intercept``, ``serve_turns``, ``request_turn``, ``flush``.

    Modules given to it (``TestBus(modules=[...])`` or ``await bus.serve(module)``)
    run on the same broker and are trusted (``trust_new``): their handlers
    are in the chain once ``serve`` returns. Several TestBus instances share
    events when given the same ``broker``. ``flush()`` returns once everything
    sent before it has been handed to its subscribers (handlers that never
    wait have finished by then).
    """

    __test__ = False  # a helper, not a test class (pytest collects classes named Test*)

    def __init__(
        self,
        *,
        modules: Iterable[Module] = (),
        broker: InProcessBroker | None = None,
        name: str = "hookbus-test",
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_depth: int = _depth.DEFAULT_MAX_DEPTH,
        strict: bool = False,
        source: str | None = None,
        trust_new: bool = True,
        managed: Iterable[str] = (),
        middleware: MiddlewareOptions | None = None,
    ) -> None:
        self.broker = broker or InProcessBroker()
        super().__init__(
            "nats://in-process",
            name=name,
            max_bytes=max_bytes,
            max_depth=max_depth,
            strict=strict,
            source=source,
            trust_new=trust_new,
            managed=managed,
            middleware=middleware,
            nats_options={"inbox_prefix": "_INBOX"},
        )
        self._modules = list(modules)
        self._trust_new = trust_new
        self._managed_names = frozenset(managed)
        self._serving: list[asyncio.Task[None]] = []

    async def _connect(self) -> Connection:
        return self.broker.connect(self.name, str(self._nats_options["inbox_prefix"]), self._on_trouble)

    #: One in-process connection carries the event subscriptions too (nothing is cut in process).
    _bulk_shared = True

    async def _connect_bulk(self, line: BulkLine) -> Connection:
        return self.port.connection()

    async def start(self) -> TestBus:
        await super().start()
        if self._modules:
            await self.serve(*self._modules)
        return self

    async def __aenter__(self) -> TestBus:
        return await self.start()

    async def serve(self, *modules: Module) -> None:
        """Serve ``modules`` on this bus until it closes; return once the kernel knows them.

        Known: each module announced and, with ``trust_new`` (or for the
        ``managed`` names), its handlers approved, so the next ``intercept``
        calls them (unless their chain is broken: a cycle, a dangling reference).
        """
        loop = asyncio.get_running_loop()
        for module in modules:
            ready = asyncio.Event()
            task = loop.create_task(module.serve(bus=self, ready=ready, detach_on_stop=True))
            self._serving.append(task)
            waiter = asyncio.ensure_future(ready.wait())
            try:
                await asyncio.wait({task, waiter}, timeout=SERVE_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if task.done():
                task.result()  # raises why it stopped
            if not ready.is_set():
                raise TimeoutError(f"module {module.name} did not start serving within {SERVE_TIMEOUT}s")
        view = await self.middleware.start()
        names = {module.name for module in modules}
        approved = [
            decl
            for module in modules
            for decl in module.declarations
            if self._trust_new or decl.qualname in self._managed_names  # the others wait for approval
        ]

        def known() -> bool:
            announced = {announcement.module for announcement, _ in view.instances.values()}
            return names <= announced and all(view.trust_of(decl).runs for decl in approved)

        await view.wait_until(known, SERVE_TIMEOUT)

    async def close(self) -> None:
        serving, self._serving = self._serving, []
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        await super().close()
