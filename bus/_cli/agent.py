"""``hookbus agent --name NAME``: the reference turn runner against an OpenAI-compatible API."""

from __future__ import annotations

import argparse
import asyncio
import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from bus._cli.common import add_metrics_port, add_nats_url, serve_metrics, stop_on_signals
from bus._cli.middleware import add_drain_workspace, middleware_options
from bus._cli.options import SERVICE_CONNECT_S, command_bus
from bus._core.errors import ConfigError
from bus._core.subjects import TOKEN_RE

if TYPE_CHECKING:
    from bus._middleware.kernel.intercept import MiddlewareOptions
    from triggers.agent._budgets import BudgetBook
    from triggers.agent.turn_runner import TurnRunner, TurnRunnerSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the reference agent: turn requests -> chat completions, with middleware and lifecycle events",
        description=(
            "Serve turn requests for agent NAME (hookbus.turn.NAME; replicas share them) by calling an "
            "OpenAI-compatible chat-completions endpoint. Asks the agent_os hook points (docs/stages.md: "
            "agent.spawn, user.message, llm.request, llm.retry, llm.token, tool.call, tool.exec, tool.result, "
            "context.evict, assistant.message, turn.done, loop.end, turn.end, turn.after, agent.error, "
            "agent.terminate), streams answers on eva.stream.NAME, "
            "keeps budgets.yaml, and emits the PRX lifecycle events and eva.turn.completed / eva.turn.failed."
        ),
    )
    parser.add_argument("--name", default=None, help="the agent's name, as triggers.yaml names it (or its --config's)")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="an agent YAML (agent_os's agent.yaml): name, system, hook_files (rule files, relative to it)",
    )
    parser.add_argument(
        "--llm-url",
        required=True,
        help="base URL, e.g. http://127.0.0.1:11434/v1; 'builtin:' starts the built-in model in this process",
    )
    parser.add_argument(
        "--model", default=None, help="the model name the endpoint serves, e.g. llama3.1:8b (builtin: optional)"
    )
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
    parser.add_argument("--no-stream", action="store_true", help="ask the model without streaming (no llm.token)")
    parser.add_argument("--stream-subject", default=None, help="where answers stream (default: eva.stream.NAME)")
    parser.add_argument(
        "--context-tokens", type=int, default=None, help="context window in approximate tokens (default: no eviction)"
    )
    parser.add_argument("--max-tokens", type=int, default=None, help="max_tokens of each model call")
    parser.add_argument(
        "--budgets", type=Path, default=None, metavar="FILE", help="budgets.yaml (default: the workspace's, if any)"
    )
    parser.add_argument("--group", default=None, help="the budgets' group key (default: NAME)")
    parser.add_argument(
        "--local-budgets",
        action="store_true",
        help="keep budgets in this process (each replica its own, a restart starts the day over), not in JetStream",
    )
    parser.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="FILE",
        help="a rule file for this agent alone (repeatable; a bare name takes a 'global: false' file of the bus)",
    )
    parser.add_argument(
        "--job-done",
        action="store_true",
        help="offer the model the job_done tool; turn.done judges each completion (docs/stages.md)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address /metrics binds (default: 127.0.0.1)")
    add_metrics_port(parser)
    add_nats_url(parser, connect_s=SERVICE_CONNECT_S)  # a service may start before its server
    add_drain_workspace(parser)
    parser.set_defaults(func=run)


def configure(args: argparse.Namespace) -> None:
    """Fold an agent YAML (``--config``) into the flags: its hook_files join --rules, a flag wins over the file."""
    if args.config is not None:
        from triggers.agent._agent_file import load

        settings = load(args.config)
        if settings.name is not None and args.name is not None and settings.name != args.name:
            raise ConfigError(f"--name {args.name!r} differs from the name in {args.config} ({settings.name!r})")
        args.name = args.name or settings.name
        args.system = args.system if args.system is not None else settings.system
        args.rules = [*settings.rules, *args.rules]
        args.hook_secs = settings.hook_secs
    if args.name is None:
        raise ConfigError("--name is required (or a name in the --config agent YAML)")


def client_key(args: argparse.Namespace) -> str | None:
    key: str | None = args.api_key or os.environ.get("OPENAI_API_KEY")
    return key


async def run(args: argparse.Namespace) -> int:
    from bus._presence import component, presence
    from triggers.agent import _agent_file as agent_file
    from triggers.agent._llm import ChatClient
    from triggers.agent._tools import with_record_tools
    from triggers.agent.turn_runner import TurnRunner

    configure(args)
    if not TOKEN_RE.fullmatch(args.name):
        raise ConfigError(f"--name {args.name!r} must match [A-Za-z0-9_-]+")
    if args.attempts < 1 or args.timeout <= 0 or args.concurrency < 1:
        raise ConfigError("--attempts and --concurrency must be at least 1, --timeout positive")
    settings = runner_settings(args)
    book = budget_book(args)
    options = kernel_options(args)
    stack = AsyncExitStack()
    if args.llm_url == "builtin:":  # triggers.agent._builtin_model.BUILTIN_URL (loaded only when used)
        from triggers.agent._builtin_model import MODEL, BuiltinModel

        args.llm_url = (await stack.enter_async_context(BuiltinModel())).url
        args.model = args.model or MODEL
    elif not args.model:
        raise ConfigError("--model is required (the model name the endpoint serves), unless --llm-url builtin:")
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
        from triggers.agent import _hook_turn as hook_turn

        specs = hook_turn.load(args.hook_turns)
        agent_file.check_hook_turns(specs, options, str(args.hook_turns))
        judge = ChatClient(args.llm_url, args.model, client_key(args), attempts=1, provider=args.provider)
        hook_turns = hook_turn.build_module(f"hook-turns-{args.name}", specs, judge)
    stop = stop_on_signals()
    try:
        metrics = serve_metrics(stack, args.host, args.metrics_port)
        managed = [decl.qualname for decl in hook_turns.declarations] if hook_turns else []
        async with command_bus(
            args,
            f"hookbus-agent-{args.name}",
            source=args.name,  # its events name it (the console's source, the dashboards' "by agent")
            managed=managed,
            middleware=options,
            rules=args.rules,
        ) as bus:
            tools = with_record_tools(bus, args.name)
            if book is not None and not args.local_budgets:
                from triggers.agent._books import SharedBooks

                # the fleet's books: every replica and restart spends from them
                books = SharedBooks.of(bus, book.config.groups)
                await books.ready()
                book.ledger = books
            runner = TurnRunner(
                bus, args.name, client, tools=tools, system=args.system, settings=settings, budgets=book
            )
            await bus.serve_turns(args.name, runner.handle, concurrency=args.concurrency)
            ticking = asyncio.create_task(_daily(runner)) if book is not None else None
            serving = asyncio.create_task(hook_turns.serve(bus=bus)) if hook_turns else None
            await bus.flush()
            extra = f" and {len(hook_turns.declarations)} hook-turns" if hook_turns else ""
            parts = [component("agent", args.name, f"turns{extra} with {args.model} at {args.llm_url}")]
            where = f", metrics {metrics}" if metrics else ""
            async with presence(bus, f"hookbus agent {args.name}", parts):
                print(f"agent {args.name}: serving turns{extra} with {args.model} at {args.llm_url}{where}", flush=True)
                await stop.wait()
            for task in (serving, ticking):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
    finally:
        await client.close()
        await stack.aclose()
    return 0


def runner_settings(args: argparse.Namespace) -> TurnRunnerSettings:
    """The runner's settings from the flags, each checked."""
    from bus._core.subjects import validate_subject
    from triggers.agent.turn_runner import TurnRunnerSettings

    for flag, value in (("--context-tokens", args.context_tokens), ("--max-tokens", args.max_tokens)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1, not {value}")
    if args.group is not None and not TOKEN_RE.fullmatch(args.group):
        raise ConfigError(f"--group {args.group!r} must match [A-Za-z0-9_-]+")
    subject = validate_subject(args.stream_subject) if args.stream_subject else None
    return TurnRunnerSettings(
        stream=not args.no_stream,
        stream_subject=subject,
        context_tokens=args.context_tokens,
        max_tokens=args.max_tokens,
        group=args.group,
        job_done=args.job_done,
    )


def kernel_options(args: argparse.Namespace) -> MiddlewareOptions:
    """The kernel's options: the workspace's, bounded by the agent YAML's ``timeouts.hook_secs`` when it sets one."""
    from triggers.agent import _agent_file as agent_file

    options = middleware_options(args)
    agent_file.apply(getattr(args, "hook_secs", None), options, str(args.config))
    return options


def budget_book(args: argparse.Namespace) -> BudgetBook | None:
    """The budgets of --budgets, else of the workspace's budgets.yaml if there is one, else None."""
    from bus._cli.workspace import resolve
    from triggers.agent import _budgets as budgets

    path = args.budgets
    if path is None:
        candidate = resolve(args).path / budgets.BUDGETS_FILE
        path = candidate if candidate.is_file() else None
    if path is None:
        return None
    config = budgets.load(path)
    if not args.local_budgets:  # the fleet's books: a shared group must name its members
        budgets.check_group(config, args.name, args.group, path)
    return budgets.BudgetBook(config)


async def _daily(runner: TurnRunner) -> None:
    """eva.spend.day on time even when no turn runs: the runner is asked once a minute whether a day ended."""
    while True:
        await asyncio.sleep(60)
        await runner.tick()
