"""What ``hookbus up`` runs from this package: the shell-hook worker, WASM plugins, the hooks HTTP API, the console."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bus.service import ServiceContext
from subscribers.http_api import agent_hooks, ask_webhook
from subscribers.http_api.ask_links import load_key
from subscribers.http_api.console_api import open_console
from subscribers.http_api.server import make_app, serve
from subscribers.http_api.token import HOOK_TOKENS_DIR, load_token
from subscribers.plugins.worker import PluginWorker
from subscribers.shell_hooks.settings import ShellHooksSettings
from subscribers.shell_hooks.worker import ShellWorker


@asynccontextmanager
async def shell_hooks(ctx: ServiceContext, settings: ShellHooksSettings) -> AsyncIterator[None]:
    """Run the workspace's shell hooks, the API that edits them and the operator's console, while the bus is up."""
    worker = ShellWorker(ctx.bus, ctx.workspace, settings.worker, nats_url=ctx.nats_url)
    await worker.start()
    plugins = PluginWorker(ctx.bus, ctx.workspace, settings.worker)
    try:
        await plugins.start()
        hooks = worker.hooks.path
        ctx.lines.append(f"  hooks    {hooks} ({len(worker.config.entries)} hooks, queue group {worker.queue or '-'})")
        ctx.lines.append(f"  plugins  {plugins.plugins.root} ({len(plugins.plugins.running())} running)")
        token, token_from = load_token(ctx.workspace)
        async with open_console(ctx) as console:
            app = make_app(hooks, token, on_write=worker.reload, console=console)
            agent_hooks.add_routes(app, ctx.bus, ctx.workspace / HOOK_TOKENS_DIR)  # POST /hooks/claude-code
            load_key(ctx.workspace)  # the asks' signed links are checked against it
            async with serve(app, settings.api_host, settings.api_port) as url:
                ctx.lines.append(f"  api      {url}/api/hooks (bearer token: {token_from})")
                ctx.lines.append(f"  console  {url}/console/ (same token)")
                async with ask_webhook.posting(console.bus, ctx.workspace, url) as webhook:
                    if webhook is not None:
                        ctx.lines.append(f"  asks     webhook to {webhook.host} ({webhook.format}, signed links)")
                    yield
    finally:
        await plugins.stop()
        await worker.stop()
