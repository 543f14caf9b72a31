"""``hookbus claude-hook`` / ``codex-hook`` / ``gemini-hook``: an agent's command hook that puts its session on the bus.

The agent runs it once per hook call with the hook input on stdin, so it has
the one-shot path of ``hookbus emit``: ``bus._cli.main`` comes here before
importing anything else, and the input goes to the relay of ``hookbus up``
(:mod:`bus.adapters.claude_code.relay`) in one request over a plain socket
(:func:`bus._transport.oneshot.request`). Without a relay it runs the mapping
itself on a full client. What it prints and its exit code are the decision in
the agent's own hook protocol (docs/integrations.md).

When the bus cannot be reached it follows the fail mode of the stage's
guards: each answer names the trusted fail-closed handlers in force, kept in
a small state file; a stage one of them guards (or any stage, with
``--fail-closed``) is refused with the cause, others continue with a
non-blocking error on stderr (exit 1).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from bus._cli.options import add_nats_url, command_bus, credentials_of
from bus._core.depth import DEFAULT_MAX_DEPTH, depth_from_env
from bus._core.errors import (
    ConnectError,
    HookbusError,
    NoResponders,
    PublishDenied,
    RequestTimeout,
    SubjectError,
)
from bus._core.schema import decode
from bus._transport import oneshot
from bus._transport.endpoints import credential_values, resolve_servers
from bus.adapters._errors import AgentHookError
from bus.adapters._schema import AdapterReplyMsg, AgentHookInput
from bus.adapters._subjects import adapter_subject
from bus.adapters.claude_code._mapping import ClaudeCodeDialect, HookAnswer, parse

if TYPE_CHECKING:
    from bus._client import Bus

COMMANDS: Final = {"claude-hook": "claude-code", "codex-hook": "codex", "gemini-hook": "gemini"}
#: The agent each command serves, as its help names it.
AGENTS: Final = {"claude-code": "Claude Code", "codex": "Codex", "gemini": "Gemini CLI"}
#: Seconds to wait for the relay's answer (the chain's own timeouts are shorter; the agent's hook timeout longer).
DEFAULT_TIMEOUT: Final = 30.0
#: The state file remembering the fail-closed guards of each bus, under $XDG_STATE_HOME (or ~/.local/state).
STATE_FILE: Final = Path("hookbus") / "agent-guards.json"
#: The largest hook input read from stdin (a tool's whole output may be in it).
MAX_INPUT: Final = 16 * 1024 * 1024


def dialect_of(flavor: str) -> ClaudeCodeDialect:
    if flavor == "codex":
        from bus.adapters.claude_code._codex import CodexDialect

        return CodexDialect()
    if flavor == "gemini":
        from bus.adapters.claude_code._gemini import GeminiDialect

        return GeminiDialect()
    return ClaudeCodeDialect()


def describe(command: str) -> str:
    agent = AGENTS[COMMANDS[command]]
    return (
        f"A {agent} command hook: reads the hook input on stdin, runs it through the bus (tool calls through "
        "the tool.call chain, results through tool.result, prompts through user.message; session events as "
        "lifecycle events) and answers in the hook's own output form. When the bus cannot be reached, a stage "
        "guarded by a fail-closed handler (as last seen) is refused, others continue. "
        f"'hookbus {command} install' prints the hooks configuration, or merges it into a settings file."
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for the decision ({DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--fail-closed", action="store_true", help="refuse every guarded call when the bus cannot be reached"
    )
    parser.add_argument("--state", type=Path, default=None, help="file remembering the fail-closed guards")
    parser.add_argument(
        "--asks",
        choices=("fleet", "terminal"),
        default="fleet",
        help="a handler's ask: held for an operator ('hookbus allow'; the default, for headless runs; give "
        "--timeout and the hook's own timeout room for it), or 'terminal': Claude Code's own ask, at its prompt",
    )
    add_nats_url(parser)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for command, flavor in COMMANDS.items():
        agent = AGENTS[flavor]
        what = f"a {agent} command hook on the bus (install: print its hooks configuration)"
        parser = subparsers.add_parser(command, help=what, description=describe(command))
        parser.add_argument("install", nargs="?", choices=["install"], help="print or merge the hooks configuration")
        configure(parser)
        from bus._cli.agent_install import configure_install

        configure_install(parser)
        parser.set_defaults(func=_run_from_parser, flavor=flavor, command=command)


async def _run_from_parser(args: argparse.Namespace) -> int:
    """From the full parser (``hookbus -v claude-hook``): the same as the fast path."""
    if args.install:
        from bus._cli.agent_install import install

        return install(args)
    return await run_full(args, *read_input(), full_only=False)


def main(command: str, argv: list[str]) -> int:
    """``hookbus claude-hook ...`` as dispatched by ``bus._cli.main``, without the other commands."""
    from bus._cli.parser import CommandParser
    from bus._cli.running import guarded

    parser = CommandParser(prog=f"hookbus {command}", description=describe(command))
    if argv[:1] == ["install"]:
        from bus._cli.agent_install import configure_install, install

        configure(parser)
        configure_install(parser)
        args = parser.parse_args(argv[1:])
        args.flavor, args.command, args.install = COMMANDS[command], command, "install"
        return guarded(lambda: install(args))
    configure(parser)
    args = parser.parse_args(argv)
    args.flavor, args.command = COMMANDS[command], command
    return guarded(lambda: hook_now(args))


def read_input() -> tuple[AgentHookInput, dict[str, Any]]:
    """The hook input on stdin, checked (AgentHookError names what is wrong)."""
    data = sys.stdin.buffer.read(MAX_INPUT + 1)
    if len(data) > MAX_INPUT:
        raise AgentHookError(f"the hook input is over {MAX_INPUT} bytes")
    hook = parse(data)
    return hook, orjson.loads(data)


def finish(answer: HookAnswer) -> int:
    """Print ``answer`` as the agent reads it and return its exit code."""
    if answer.output is not None:
        sys.stdout.write(orjson.dumps(answer.output).decode() + "\n")
    if answer.stderr:
        sys.stderr.write(answer.stderr.rstrip("\n") + "\n")
    return answer.exit_code


def hook_now(args: argparse.Namespace) -> int:
    """The fast path: one request to the relay; the full client without one; the fail mode without a bus."""
    try:
        hook, raw = read_input()
    except AgentHookError as exc:
        return finish(HookAnswer(exit_code=1, stderr=f"hookbus: {exc}"))
    depth = depth_from_env()
    if depth >= DEFAULT_MAX_DEPTH:
        return 0  # at the recursion limit an intercept continues and events are dropped: nothing to ask
    servers = resolve_servers(args.nats_url)
    settings = credential_values(overrides=credentials_of(args).overrides())
    body = orjson.dumps({"input": raw, "depth": depth, "asks": getattr(args, "asks", "fleet")})
    try:
        data = None
        if oneshot.supported(servers, settings):
            data = oneshot.request(
                servers,
                adapter_subject(args.flavor, oneshot.user_of(servers, settings)),
                body,
                settings,
                name=f"hookbus-{args.command}",
                connect_budget=args.connect_timeout,
                timeout=args.timeout,
            )
    except NoResponders:
        data = None  # no hookbus up relaying: run the mapping here
    except (
        ConnectError,
        RequestTimeout,
        PublishDenied,
        SubjectError,
    ) as exc:  # SubjectError: a user name no subject takes
        return finish(fail_mode(args, hook, servers, str(exc)))
    if data is None:
        import asyncio

        from bus._cli.running import configure_logging

        configure_logging(0)
        return asyncio.run(run_full(args, hook, raw, full_only=True))
    try:
        reply = decode(data, AdapterReplyMsg, "the relay's answer", AgentHookError)
    except AgentHookError as exc:
        return finish(fail_mode(args, hook, servers, str(exc)))
    if reply.error is not None:
        return finish(fail_mode(args, hook, servers, f"the relay refused the input: {reply.error}"))
    remember(args, servers, reply.fail_closed)
    return finish(HookAnswer(reply.exit_code, reply.output, reply.stderr))


async def run_full(args: argparse.Namespace, hook: AgentHookInput, raw: dict[str, Any], *, full_only: bool) -> int:
    """The mapping on a full client of this process's own (no relay, or ``hookbus -v``)."""
    from bus._core.depth import set_depth
    from bus.adapters.claude_code._mapping import answer, fail_closed_guards

    servers = resolve_servers(args.nats_url)
    depth = depth_from_env()
    if depth >= DEFAULT_MAX_DEPTH:
        return 0
    set_depth(depth)
    bus: Bus | None = None
    try:
        async with command_bus(args, f"hookbus-{args.command}") as bus:
            done = await answer(bus, hook, dialect_of(args.flavor), asks=getattr(args, "asks", "fleet"))
            guards = fail_closed_guards(bus)
            await bus.flush()
    except HookbusError as exc:  # no server, a refused grant, a registry it cannot read: no decision
        return finish(fail_mode(args, hook, servers, str(exc)))
    remember(args, servers, guards)
    return finish(done)


def fail_mode(args: argparse.Namespace, hook: AgentHookInput, servers: list[str], cause: str) -> HookAnswer:
    """No decision could be had: refuse a stage guarded fail-closed (as last seen, or --fail-closed), else go on."""
    dialect = dialect_of(args.flavor)
    step = dialect.plan(hook)
    if step.stage is None:
        return HookAnswer(exit_code=1, stderr=f"hookbus: {hook.hook_event_name} not sent: {cause}")
    guards = recalled(args, servers).get(step.stage, [])
    if guards or args.fail_closed:
        who = ", ".join(guards) if guards else f"{step.stage} (--fail-closed)"
        return dialect.deny(step.event, f"hookbus: {who} is fail-closed and the bus cannot be reached: {cause}")
    return HookAnswer(exit_code=1, stderr=f"hookbus: {cause}; {step.stage} continues (no fail-closed guard known)")


def _state_path(args: argparse.Namespace) -> Path:
    if args.state is not None:
        return Path(args.state)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / STATE_FILE


def _state(path: Path) -> dict[str, Any]:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def recalled_entry(args: argparse.Namespace, servers: list[str]) -> dict[str, Any]:
    """Everything the state file keeps for these servers (``hookbus mcp`` keeps its guards' matches there too)."""
    entry = _state(_state_path(args)).get(",".join(servers))
    return entry if isinstance(entry, dict) else {}


def recalled(args: argparse.Namespace, servers: list[str]) -> dict[str, list[str]]:
    """The fail-closed guards last seen on these servers, per stage (a damaged entry counts as none)."""
    entry = _state(_state_path(args)).get(",".join(servers))
    if not isinstance(entry, dict):
        return {}
    return {stage: [str(n) for n in names] for stage, names in entry.items() if isinstance(names, list)}


def remember(
    args: argparse.Namespace, servers: list[str], guards: dict[str, Any], stages: Iterable[str] | None = None
) -> None:
    """Keep what the bus said about its fail-closed guards, written (owner-only, atomically) only when it changed.

    ``stages``: the stages ``guards`` speaks for (the hook stages by default); what the file holds for other
    stages (``hookbus mcp``'s) is kept.
    """
    from bus.adapters.claude_code._mapping import HOOK_STAGES

    spoken = set(HOOK_STAGES if stages is None else stages)
    path = _state_path(args)
    state = _state(path)
    key = ",".join(servers)
    old = state.get(key)
    kept = {s: n for s, n in old.items() if s not in spoken} if isinstance(old, dict) else {}
    merged = {**kept, **guards}
    if old == merged:
        return
    state[key] = merged
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(orjson.dumps(state, option=orjson.OPT_INDENT_2))
        os.replace(partial, path)
    except OSError as exc:
        print(f"hookbus: cannot keep the fail-closed guards in {path}: {exc}", file=sys.stderr)
