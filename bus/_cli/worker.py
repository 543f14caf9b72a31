"""``hookbus worker``: run only the shell-hook worker (and the WASM plugins beside it), against an existing NATS.

Start it on as many machines as you like with the same ``--queue``: they share
the events, and each event's hooks run on one of them.
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack

from bus._cli.common import add_metrics_port, add_nats_url, serve_metrics, stop_on_signals
from bus._cli.options import SERVICE_CONNECT_S, command_bus
from bus._cli.parser import add_command
from bus._cli.worker_options import add_worker_options, worker_settings
from bus._cli.workspace import add_workspace, existing


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "worker", "run the shell hooks of a workspace against an existing NATS", __doc__)
    add_workspace(parser, "workspace with hooks.json")
    add_metrics_port(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address /metrics binds (default: 127.0.0.1)")
    add_nats_url(parser, connect_s=SERVICE_CONNECT_S)  # a service may start before its server
    add_worker_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from bus._presence import component, presence
    from bus.adapters.claude_code.command_modules import ClaudeHooksServer, ClaudePluginsServer
    from subscribers.plugins.plugin_worker import PluginWorker
    from subscribers.shell_hooks.shell_worker import ShellWorker

    settings = worker_settings(args)  # flags first: a bad flag is named before a missing workspace
    workspace = existing(args).path
    stop = stop_on_signals()
    bus = command_bus(args, "hookbus-worker")
    async with AsyncExitStack() as stack:
        worker = await stack.enter_async_context(ShellWorker(await stack.enter_async_context(bus), workspace, settings))
        plugins = await stack.enter_async_context(PluginWorker(bus, workspace, settings))
        claude = ClaudeHooksServer(bus, workspace, args.nats_url)  # claude-hooks.json, served as module claude-hooks
        await claude.start()
        stack.push_async_callback(claude.stop)
        claude_plugins = ClaudePluginsServer(bus, workspace, args.nats_url)  # claude-plugins/<name>/: Claude Code's
        await claude_plugins.start()
        stack.push_async_callback(claude_plugins.stop)
        hooks = f"{worker.hooks.path} ({len(worker.config.entries)} hooks, {len(plugins.plugins.running())} plugins)"
        url = serve_metrics(stack, args.host, args.metrics_port)
        metrics = f", metrics {url}" if url else ""
        detail = f"{worker.hooks.path}, queue group {worker.queue or '-'}"
        await stack.enter_async_context(presence(bus, "hookbus worker", [component("worker", "shell hooks", detail)]))
        print(
            f"hookbus worker: {hooks} on {', '.join(bus.servers)}, queue group {worker.queue or '-'}{metrics}; ready",
            flush=True,
        )
        await stop.wait()
    print("hookbus worker: stopped", flush=True)
    return 0
