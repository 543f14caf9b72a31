"""``hookbus up``: run the bus on one machine.

Starts the embedded nats-server (JetStream, store in the workspace) unless
``--nats-url``/``$NATS_URL`` names an existing one, serves Prometheus metrics,
runs the workers of the workspace, prints where everything listens, and stops
all of it cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from bus._cli.common import add_nats_url, connection_args, serve_metrics, stop_on_signals
from bus._cli.options import SERVICE_CONNECT_S
from bus._cli.parser import add_command
from bus._cli.worker_options import add_worker_options, worker_settings
from bus._cli.workspace import add_workspace
from bus._cli.workspace import resolve as resolve_workspace
from bus._client import Bus
from bus._core.errors import ConfigError, ConnectError, PortInUse, ServerError
from bus._core.subjects import BUDGET_BUCKETS, BUDGET_MAX_AGE_S, PRESENCE_BUCKET, RULES_BUCKET
from bus._middleware.asks.store import ensure_asks_bucket
from bus._middleware.kernel.approvals import approvals_held
from bus._middleware.registry import ensure_buckets
from bus._middleware.rules.publish import check_folder, push_folder
from bus._presence import MAX_AGE_S as PRESENCE_MAX_AGE_S
from bus._presence import PresenceComponent, component, presence
from bus._runtime.filelock import WorkspaceLock
from bus._runtime.private_files import private_dir
from bus._runtime.quantities import parse_duration, parse_size
from bus._service import Connector, Service, ServiceContext
from bus._transport.connection import URL_ENV
from bus._transport.server import NatsServer

if TYPE_CHECKING:
    from subscribers.history.recorder import HistorySettings

DEFAULT_PORT = 4222
DEFAULT_HTTP_PORT = 8477
DEFAULT_METRICS_PORT = 9477


def services(args: argparse.Namespace) -> list[Service]:
    """The services ``hookbus up`` runs, in start order, each with its settings from the flags.

    Imported here, not at module load: the other commands do not load the workers.
    """
    # Imported here: bus/ must not import the workers when it is loaded.
    from bus.adapters.claude_code import command_modules as claude_hooks
    from bus.adapters.claude_code import relay as agent_hook_relay
    from subscribers import agent_metrics
    from subscribers.fleet_metrics import receiver as fleet_metrics
    from subscribers.history import recorder as history
    from subscribers.http_api import server as hooks_api
    from subscribers.journal import sink as journal_sink
    from subscribers.plugins import plugin_worker as plugins
    from subscribers.shell_hooks import shell_worker as shell_hooks
    from subscribers.shell_hooks._failures import failure_lines
    from triggers.engine import engine as triggers

    worker = worker_settings(args)
    reload = shell_hooks.HooksReload()  # the API's writes to hooks.json take effect at once
    api = hooks_api.ApiSettings(host=args.host, port=args.http_port)
    history_plan = history_settings(args, resolve_workspace(args).path)
    recording = [partial(history.service, settings=history_plan)] if history_plan else []
    return [
        *recording,  # first: events are kept from the moment the bus is up
        journal_sink.service,
        agent_metrics.service,
        fleet_metrics.service,
        failure_lines,
        partial(shell_hooks.service, settings=worker, reload=reload),
        partial(plugins.service, settings=worker),  # WASM plugins, beside the shell hooks
        partial(hooks_api.service, settings=api, on_write=reload),  # the hooks API and the console
        triggers.service,
        agent_hook_relay.service,  # hookbus claude-hook / codex-hook ask it
        claude_hooks.service,  # claude-hooks.json's command hooks as middleware handlers
        *problems_turn(args),  # a broken chain asks an agent to fix its records' references
    ]


def problems_turn(args: argparse.Namespace) -> list[Service]:
    """The problems turn's service, unless ``--problems-agent off``; a bad flag is a ConfigError naming it."""
    from triggers.engine import problems

    if args.problems_agent == "off":
        return []
    try:
        settings = problems.ProblemsSettings(agent=args.problems_agent, cooldown_s=args.problems_cooldown)
    except ValueError as exc:
        raise ConfigError(f"--problems-agent/--problems-cooldown: {exc}") from None
    return [partial(problems.service, settings=settings)]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "up", "run the bus on this machine (embedded NATS, metrics, workers)", __doc__)
    add_workspace(parser, "workspace directory, created if missing")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"embedded NATS client port (default: {DEFAULT_PORT}; 0: any free port)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address the embedded NATS and HTTP servers bind (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--http-port", type=int, default=DEFAULT_HTTP_PORT, help=f"hooks HTTP API port (default: {DEFAULT_HTTP_PORT})"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"Prometheus /metrics port (default: {DEFAULT_METRICS_PORT}; -1: off)",
    )
    add_nats_url(parser, connect_s=SERVICE_CONNECT_S)  # a service may start before its server
    add_worker_options(parser)
    record = parser.add_argument_group("recorded history (opt-in; read with tail --since, journal --events, replay)")
    record.add_argument(
        "--record",
        action="append",
        default=[],
        metavar="PATTERN",
        help=(
            "keep the events of PATTERN in the JetStream stream HOOKBUS_HISTORY "
            "(repeatable: 'prx.>', 'eva.>'; default: the workspace's history.yaml)"
        ),
    )
    record.add_argument("--record-max-age", help="drop recorded events older than this (default: 7d)")
    record.add_argument("--record-max-bytes", help="keep at most this much, the oldest go first (default: 1GiB)")
    parser.add_argument(
        "--problems-agent",
        default="eva",
        help="agent asked to fix a broken chain's references (docs/records.md; 'off': no problems turn; default: eva)",
    )
    parser.add_argument(
        "--problems-cooldown", type=float, default=300.0, help="seconds between problems turns per stage"
    )
    parser.set_defaults(func=run)


#: The workspace file that says what to record when ``--record`` is not given.
HISTORY_FILE = "history.yaml"


def history_settings(args: argparse.Namespace, workspace: Path) -> HistorySettings | None:
    """What to record, from ``--record`` and its limits, else ``<workspace>/history.yaml``; None: nothing.

    A flag wins over the file, the file over the defaults; a bad pattern or
    limit is a ConfigError naming the flag or the file and field.
    """
    from bus._core.schema import convert
    from bus._runtime.config_files import read_yaml
    from subscribers.history._config_schema import HistoryFile
    from subscribers.history.recorder import DEFAULT_MAX_AGE_S, DEFAULT_MAX_BYTES, HistorySettings, checked_patterns

    path = workspace / HISTORY_FILE
    doc = None if args.record else read_yaml(path, missing_ok=True)
    config = None if doc is None else convert(doc, HistoryFile, str(path), ConfigError)
    patterns = tuple(args.record) if args.record else tuple(config.record) if config else ()
    if not patterns:
        return None
    age = args.record_max_age or (config.max_age if config else None)
    size = args.record_max_bytes or (config.max_bytes if config else None)
    try:
        return HistorySettings(
            patterns=checked_patterns(patterns),
            max_age_s=parse_duration(age, "--record-max-age") if age else DEFAULT_MAX_AGE_S,
            max_bytes=parse_size(size, "--record-max-bytes") if size else DEFAULT_MAX_BYTES,
        )
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if config else str(exc)) from None


#: The lock file that makes one hookbus up the owner of its workspace.
UP_LOCK = "up.lock"


def _check_port(name: str, port: int, allow_off: bool = False) -> None:
    low = -1 if allow_off else 0
    if not low <= port <= 65535:
        raise ConfigError(f"--{name} {port} is not a port number (0-65535{', or -1 for off' if allow_off else ''})")


async def run(args: argparse.Namespace) -> int:
    _check_port("port", args.port)
    _check_port("http-port", args.http_port)
    _check_port("metrics-port", args.metrics_port, allow_off=True)
    workspace = resolve_workspace(args).path
    history_settings(args, workspace)  # a bad pattern, limit or history.yaml is refused before anything starts
    private_dir(workspace)  # 0700 if new: hooks.json, the journal, the token live there
    stop = stop_on_signals()

    async with AsyncExitStack() as stack:
        stack.enter_context(WorkspaceLock(workspace / UP_LOCK))  # a second hookbus up here is refused
        server = None
        nats_url = args.nats_url or os.environ.get(URL_ENV)
        fresh_store = not (workspace / "jetstream").exists()
        if not nats_url:
            # Monitoring (for the NATS dashboard, exported on /metrics) only on a loopback address: it has no auth.
            monitored = _loopback(args.host) and args.metrics_port >= 0
            server = NatsServer(
                port=args.port,
                host=args.host,
                store_dir=workspace / "jetstream",
                die_with_parent=True,
                http_port=0 if monitored else None,
            )
            stack.callback(server.cleanup)
            await _start(server)
            nats_url = server.url
            if monitored and server.http_port:
                _export_varz(args.host, server.http_port)
        connect = _connector(nats_url, args)
        try:
            bus = await stack.enter_async_context(connect("hookbus-up"))
        except ConnectError as exc:
            if server is None and exc.refused:
                raise ConfigError(_joined_nothing(args, public_url_of(nats_url))) from None
            raise
        # agents and modules may read the middleware state, not create it
        await ensure_buckets(bus.port, (PRESENCE_BUCKET, PRESENCE_MAX_AGE_S), (RULES_BUCKET, None))
        await ensure_asks_bucket(bus.port)  # agents write their asks there and may not create it
        for name in BUDGET_BUCKETS.values():  # the budgets' books: agents add to them and may not create them
            await bus.port.counter_bucket(name, BUDGET_MAX_AGE_S).ensure()
        rules_folder = workspace / "rules"
        pushed = await push_folder(bus.port, rules_folder, check_folder(rules_folder))
        from bus._sandbox.security import public_url  # workers load with the services, not with the CLI

        lines = [f"hookbus up: workspace {workspace}"]
        shown = public_url(nats_url)  # never print credentials
        where = f"{server.url} (embedded, JetStream store {server.store_dir})" if server else f"{shown} (external)"
        lines.append(f"  nats     {where}")
        lines.append(f"  trust    {await _approvals_line(bus, server, fresh_store)}")
        if pushed:
            lines.append(f"  rules    {pushed}")
        metrics = serve_metrics(stack, args.host, args.metrics_port)
        if metrics:
            lines.append(f"  metrics  {metrics}")
        ctx = ServiceContext(bus=bus, workspace=workspace, nats_url=nats_url, connect=connect, lines=lines)
        for service in services(args):
            await stack.enter_async_context(service(ctx))
        await stack.enter_async_context(presence(bus, "hookbus up", _components(workspace, where, args)))
        lines.append(f"ready (pid {os.getpid()}); Ctrl-C or SIGTERM stops everything")
        print("\n".join(lines), flush=True)
        await _wait(stop, server)
    print("hookbus up: stopped", flush=True)
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _export_varz(host: str, port: int) -> None:
    """The embedded server's figures on /metrics as ``gnatsd_varz_*`` (the NATS dashboard's names)."""
    from bus._metrics import register_once
    from subscribers.fleet_metrics._nats_varz import VarzCollector  # services load with the services

    register_once([VarzCollector(host, port)])


def _joined_nothing(args: argparse.Namespace, shown: str) -> str:
    """Why ``hookbus up`` did not start its own server, when the one it was told to join is not there."""
    told = "--nats-url" if args.nats_url else f"${URL_ENV} (set in this shell's environment)"
    undo = "drop --nats-url" if args.nats_url else f"unset {URL_ENV}"
    return (
        f"{told} names {shown}, so hookbus up joins that server instead of starting its own, and nothing "
        f"listens there: {undo} to run the embedded server, or start the server it names"
    )


def public_url_of(nats_url: str) -> str:
    from bus._sandbox.security import public_url  # workers load with the services, not with the CLI

    return public_url(nats_url)


def _connector(nats_url: str, args: argparse.Namespace) -> Connector:
    """Further connections for services, made as the main one is: same server, connect budget, credentials."""
    settings = connection_args(args)

    def connect(name: str) -> Bus:  # the events each service emits name it as their source
        return Bus(nats_url, name=name, source=name, **settings)

    return connect


def _components(workspace: Path, where: str, args: argparse.Namespace) -> list[PresenceComponent]:
    """What ``hookbus up`` runs, for ``hookbus status``."""
    return [
        component("bus", "nats", where),
        component("worker", "shell hooks", f"{workspace / 'hooks.json'}, queue group {args.queue or '-'}"),
        component("trigger_engine", "triggers", str(workspace / "triggers.yaml")),
        component("journal_sink", "journal", str(workspace / "journal.db")),
    ]


async def _approvals_line(bus: Bus, server: NatsServer | None, fresh_store: bool) -> str:
    """How many handler approvals the bus holds: they live in its JetStream store, not in the workspace."""
    count = await approvals_held(bus.port)
    if server is None:
        return f"{count} approved handlers on this bus (its JetStream store)"
    if count == 0 and fresh_store:
        return (
            f"no approved handlers: this workspace's embedded bus is new ({server.store_dir}); "
            "approvals made on another bus do not carry over: 'hookbus approve NAME' here"
        )
    return f"{count} approved handlers (kept in {server.store_dir})"


async def _start(server: NatsServer) -> None:
    """Start the embedded server; a busy port is one line naming the flag that changes it."""
    try:
        await asyncio.to_thread(server.start)
    except PortInUse as exc:
        raise ConfigError(
            f"{exc}: choose another with --port (0: any free port), "
            f"or use the bus already there with --nats-url nats://{exc.host}:{exc.port}"
        ) from None


async def _wait(stop: asyncio.Event, server: NatsServer | None) -> None:
    """Wait for a stop signal; fail if the embedded server dies under us."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except TimeoutError:
            if server is not None and not server.running():
                print("hookbus up: the embedded nats-server exited; stopping", file=sys.stderr, flush=True)
                raise ServerError(f"nats-server exited; see {server.log_path}") from None
