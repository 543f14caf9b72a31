"""An example middleware module: no recursive deletes, fail-closed. Run replicas of it freely."""

from __future__ import annotations

import asyncio
from typing import Any

from bus import Cancel, Continue, Module, Stage

module = Module("guard")


@module.stage(Stage.TOOL_CALL, match="shell", fail_closed=True, timeout=2.0)
async def no_rm(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
    if "rm -rf" in str(payload.get("input", {}).get("command", "")):
        return Cancel("recursive delete: only by hand")
    return Continue()


if __name__ == "__main__":
    asyncio.run(module.serve())  # $NATS_URL, else nats://127.0.0.1:4222
