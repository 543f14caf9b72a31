"""``hookbus agent --name NAME``: the reference turn runner against an OpenAI-compatible API."""

from __future__ import annotations

import argparse
import asyncio
import os
from contextlib import AsyncExitStack
from pathlib import Path

from bus.cli.common import add_metrics_port, add_nats_url, connection_args, serve_metrics, stop_on_signals
from bus.cli.middleware import add_drain_workspace, middleware_options
from bus.cli.options import SERVICE_CONNECT_S
from bus.client import Bus
from bus.core.errors import ConfigError
from bus.core.subjects import TOKEN_RE


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the reference agent: turn requests -> chat completions, with middleware and lifecycle events",
        description=(
            "Serve turn requests for agent NAME (hookbus.turn.NAME; replicas share them) by calling an "
            "OpenAI-compatible chat-completions endpoint. Runs the llm.request and tool.call middleware "
            "stages and emits the PRX lifecycle events and eva.turn.completed / eva.turn.failed."
        ),
    )
    parser.add_argument("--name", required=True, help="the agent's name, as triggers.yaml names it")
    parser.add_argument("--llm-url", required=True, help="base URL, e.g. http://127.0.0.1:11434/v1")
    parser.add_argument("--model", required=True, help="the model name the endpoint serves, e.g. llama3.1:8b")
    parser.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    parser.add_argument("--provider", default="openai-compatible", help="provider label in events and metrics")
    parser.add_argument("--system", default=None, help="a system prompt")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per model call (default: 60)")
    parser.add_argument("--attempts", type=int, default=3, help="tries per model call (default: 3)")
    parser.add_argument("--concurrency", type=int, default=4, help="turns at once (default: 4)")
    parser.add_argument(
        "--hook-turns",
        type=Path,
        default=None,
        metavar="FILE",
        help="hook_turns.yaml: serve these stages by asking the model (module hook-turns-NAME, managed by this agent)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address /metrics binds (default: 127.0.0.1)")
    add_metrics_port(parser)
    add_nats_url(parser, connect_s=SERVICE_CONNECT_S)  # a service may start before its server
    add_drain_workspace(parser)
    parser.set_defaults(func=run)


def client_key(args: argparse.Namespace) -> str | None:
    key: str | None = args.api_key or os.environ.get("OPENAI_API_KEY")
    return key


async def run(args: argparse.Namespace) -> int:
    from bus.presence import component, presence
    from triggers.agent.llm import ChatClient
    from triggers.agent.runner import TurnRunner

    if not TOKEN_RE.fullmatch(args.name):
        raise ConfigError(f"--name {args.name!r} must match [A-Za-z0-9_-]+")
    if args.attempts < 1 or args.timeout <= 0 or args.concurrency < 1:
        raise ConfigError("--attempts and --concurrency must be at least 1, --timeout positive")
    client = ChatClient(
        args.llm_url,
        args.model,
        client_key(args),
        timeout=args.timeout,
        attempts=args.attempts,
        provider=args.provider,
    )
    hook_turns = None
    if args.hook_turns is not None:
        from triggers.agent import hook_turn

        specs = hook_turn.load(args.hook_turns)
        judge = ChatClient(args.llm_url, args.model, client_key(args), attempts=1, provider=args.provider)
        hook_turns = hook_turn.build_module(f"hook-turns-{args.name}", specs, judge)
    stop = stop_on_signals()
    stack = AsyncExitStack()
    try:
        metrics = serve_metrics(stack, args.host, args.metrics_port)
        managed = [decl.qualname for decl in hook_turns.declarations] if hook_turns else []
        async with Bus(
            args.nats_url,
            name=f"hookbus-agent-{args.name}",
            **connection_args(args),
            managed=managed,
            middleware=middleware_options(args),
        ) as bus:
            runner = TurnRunner(bus, args.name, client, system=args.system)
            await bus.serve_turns(args.name, runner.handle, concurrency=args.concurrency)
            serving = asyncio.create_task(hook_turns.serve(bus=bus)) if hook_turns else None
            await bus.flush()
            extra = f" and {len(hook_turns.declarations)} hook-turns" if hook_turns else ""
            parts = [component("agent", args.name, f"turns{extra} with {args.model} at {args.llm_url}")]
            where = f", metrics {metrics}" if metrics else ""
            async with presence(bus, f"hookbus agent {args.name}", parts):
                print(f"agent {args.name}: serving turns{extra} with {args.model} at {args.llm_url}{where}", flush=True)
                await stop.wait()
            if serving is not None:
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
    finally:
        await client.close()
        await stack.aclose()
    return 0
