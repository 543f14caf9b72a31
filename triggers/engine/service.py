"""``hookbus up`` runs the triggers of its workspace, reloading triggers.yaml when it changes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bus.runtime.filewatch import WatchedFile
from bus.service import ServiceContext
from triggers.engine import config
from triggers.engine.config import TriggerSpec
from triggers.engine.engine import TriggerEngine


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    engine = await TriggerEngine(ctx.bus).start()
    path = ctx.workspace / config.FILE_NAME
    watched: WatchedFile[dict[str, TriggerSpec]] = WatchedFile(path, config.load, engine.apply, {})
    await watched.check()
    stop = asyncio.Event()
    task = asyncio.create_task(watched.run(stop), name="triggers-reload")
    ctx.lines.append(f"  triggers {path} ({len(engine.specs)} loaded, reloaded on change)")
    try:
        yield
    finally:
        stop.set()
        await task
        await engine.stop()
