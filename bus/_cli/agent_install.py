"""``hookbus claude-hook install`` / ``codex-hook install``: the hooks configuration that runs them.

Prints the ``hooks`` object for Claude Code's settings file (or Codex's
hooks.json: the same shape), or merges it into the file given with
``--settings``: earlier hookbus entries are replaced, everything else kept,
the file written atomically. ``--http URL`` configures Claude Code's ``http``
hook type against ``hookbus up``'s endpoint instead (one local round trip per
hook, no process start), with the bearer token taken from an environment
variable Claude Code is allowed to read.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Final

import orjson

from bus._core.errors import ConfigError
from bus._core.json_types import json_type

#: The endpoint path ``hookbus up`` serves Claude Code's http hooks on.
HTTP_PATH: Final = "/hooks/claude-code"
#: The variable the http hook's Authorization header reads its agent's hook-only token from (never the admin one).
TOKEN_VARIABLE: Final = "HOOKBUS_HOOK_TOKEN"
#: Seconds Claude Code gives the hook (its own unit for hook timeouts).
DEFAULT_HOOK_TIMEOUT: Final = 30
_OURS: Final = ("claude-hook", "codex-hook", "gemini-hook")


def configure_install(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("install")
    group.add_argument("--settings", type=Path, default=None, help="merge into this settings (or hooks.json) file")
    group.add_argument("--http", metavar="URL", default=None, help="http hooks to hookbus up at URL (Claude Code)")
    group.add_argument(
        "--agent",
        metavar="NAME",
        default=None,
        help="with --http: the agent whose hook-only token the hook sends (made in the workspace's hook-tokens/)",
    )
    group.add_argument(
        "--workspace",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --http: hookbus up's workspace, where hook tokens are kept (default: ./.hookbus)",
    )
    group.add_argument(
        "--hook-timeout", type=int, default=DEFAULT_HOOK_TIMEOUT, help="the agent's timeout per hook, in seconds"
    )


def _command(args: argparse.Namespace) -> str:
    """How the agent runs this hook: the installed script (else this interpreter's module) and the flags given."""
    script = shutil.which("hookbus")
    base = shlex.quote(script) if script else f"{shlex.quote(sys.executable)} -m bus._cli"
    parts = [base, args.command]
    if args.nats_url:
        parts += ["--nats-url", shlex.quote(args.nats_url)]
    if args.fail_closed:
        parts.append("--fail-closed")
    return " ".join(parts)


def _handler(args: argparse.Namespace, event: str) -> dict[str, Any]:
    if args.http:
        hook: dict[str, Any] = {
            "type": "http",
            "url": args.http.rstrip("/") + HTTP_PATH,
            "headers": {"Authorization": f"Bearer ${TOKEN_VARIABLE}"},
            "allowedEnvVars": [TOKEN_VARIABLE],
            "timeout": args.hook_timeout,
        }
        if args.fail_closed and event in ("PreToolUse", "UserPromptSubmit"):
            hook["onFailure"] = "block"
        return hook
    if args.flavor == "gemini":  # Gemini CLI counts a hook's timeout in milliseconds
        return {"name": "hookbus", "type": "command", "command": _command(args), "timeout": args.hook_timeout * 1000}
    return {"type": "command", "command": _command(args), "timeout": args.hook_timeout}


def hooks_config(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The ``hooks`` object: one matcher group per event (tool events match every tool)."""
    from bus.adapters.claude_code import _codex as codex
    from bus.adapters.claude_code import _gemini as gemini
    from bus.adapters.claude_code import _mapping as claude_code

    events: tuple[str, ...]
    tool_events: frozenset[str] = claude_code.TOOL_EVENTS
    if args.flavor in ("codex", "gemini"):
        if args.http:
            agent = "Codex" if args.flavor == "codex" else "Gemini CLI"
            raise ConfigError(f"--http: {agent} has no http hook type; install the command hook")
        events = codex.INSTALLED_EVENTS if args.flavor == "codex" else gemini.INSTALLED_EVENTS
        tool_events = tool_events if args.flavor == "codex" else gemini.TOOL_EVENTS
    else:
        events = claude_code.INSTALLED_EVENTS
    config: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        group: dict[str, Any] = {"matcher": "*"} if event in tool_events else {}
        group["hooks"] = [_handler(args, event)]
        config[event] = [group]
    return config


def _is_ours(hook: object) -> bool:
    if not isinstance(hook, dict):
        return False
    command, url = hook.get("command"), hook.get("url")
    if isinstance(command, str) and any(word in _OURS for word in command.split()):
        return True
    return isinstance(url, str) and url.endswith(HTTP_PATH)


def merged(settings: dict[str, Any], ours: dict[str, list[dict[str, Any]]], where: str) -> dict[str, Any]:
    """``settings`` with hookbus's earlier hooks removed and ``ours`` added; the rest untouched."""
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError(f"{where}: 'hooks' must be an object, not {json_type(hooks)}")
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise ConfigError(f"{where}: hooks.{event} must be a list, not {json_type(groups)}")
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                group = {**group, "hooks": [hook for hook in group["hooks"] if not _is_ours(hook)]}
                if not group["hooks"]:
                    continue
            kept.append(group)
        hooks[event] = kept
    for event, groups in ours.items():
        hooks[event] = [*hooks.get(event, []), *groups]
    return settings


def install(args: argparse.Namespace) -> int:
    """Print the configuration, or merge it into ``--settings``."""
    ours = hooks_config(args)
    if args.http:
        _hook_token(args)
    if args.settings is None:
        print(orjson.dumps({"hooks": ours}, option=orjson.OPT_INDENT_2).decode())
        return 0
    path: Path = args.settings
    where = str(path)
    try:
        current = orjson.loads(path.read_bytes()) if path.exists() else {}
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not valid JSON ({exc}); fix it first") from None
    if not isinstance(current, dict):
        raise ConfigError(f"{where} must hold a JSON object, not {json_type(current)}")
    result = merged(current, ours, where)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    if path.exists():
        os.chmod(partial, path.stat().st_mode & 0o777)
    os.replace(partial, path)
    if args.flavor == "codex":
        _print_codex_trust(path, result["hooks"])
    print(f"hookbus: {args.command} hooks for {', '.join(ours)} written to {path}")
    return 0


def _print_codex_trust(path: Path, hooks: dict[str, Any]) -> None:
    """Codex runs a user or project hook only once its hash is trusted: the entries that trust hookbus's."""
    from bus.adapters.claude_code._codex import trust_entries

    entries = trust_entries(str(path.resolve()), hooks, _is_ours)
    print(
        "Codex runs these hooks only once trusted (review them in Codex, or add to its config.toml):",
        file=sys.stderr,
    )
    for key, digest in entries:
        print(f'[hooks.state."{key}"]\ntrusted_hash = "{digest}"', file=sys.stderr)


def _hook_token(args: argparse.Namespace) -> None:
    """Make the agent's hook-only token (refused by every admin route) and say how the session gets it."""
    from bus._cli.workspace import resolve
    from subscribers.http_api._token import hook_token

    if not args.agent:
        raise ConfigError("--http needs --agent NAME: the hook sends that agent's hook-only token")
    _token, path = hook_token(resolve(args).path, args.agent)
    print(
        f"hookbus: give the session {TOKEN_VARIABLE}=$(cat {shlex.quote(str(path))}) "
        f"(agent {args.agent}'s hook token: the hook route only, no admin route)",
        file=sys.stderr,
    )
