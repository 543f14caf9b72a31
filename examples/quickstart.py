"""Subscribe to tool calls, emit one, and see it come back (the README's first Python example).

Run it against a running bus: ``python3 examples/quickstart.py`` ($NATS_URL, else nats://127.0.0.1:4222).
"""

import asyncio

from bus import Bus, Event


async def main() -> None:
    async with Bus() as bus:  # $NATS_URL, else nats://127.0.0.1:4222
        seen = asyncio.Event()

        async def on_tool_call(event: Event) -> None:
            print(event.event, event.payload["tool"], event.depth)
            await bus.emit("eva.custom.audited", {"id": event.id})  # carries depth + 1
            seen.set()

        await bus.subscribe("prx.lifecycle.tool_call", on_tool_call, queue="auditors")
        await bus.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True, "output": "ok"}, session_id="s1")
        await asyncio.wait_for(seen.wait(), timeout=10)


asyncio.run(main())
