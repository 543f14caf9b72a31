"""``hookbus plugins``: list the WASM plugins of a workspace; ``hookbus plugins test NAME EVENT [JSON]`` runs one once.

The list shows each plugin under <workspace>/plugins: version, kind (component
or core module), the event patterns it receives, its limits, grants and PRX
host interfaces, what of its manifest has no meaning here, and why its newest
version is refused, if it is. ``test`` loads the plugin as the
worker would and calls its on-event with the event built by the bus's own
codec; it exits 1 when the plugin returns Err, traps or runs out of time.
"""

from __future__ import annotations

import argparse

from bus._cli.common import read_json_object
from bus._cli.parser import add_command
from bus._cli.workspace import add_workspace, existing


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "plugins", "list the WASM plugins of a workspace, or run one once (test)", __doc__)
    add_workspace(parser, "workspace with plugins/")
    parser.set_defaults(func=run_list)
    commands = parser.add_subparsers(dest="plugins_command", metavar="COMMAND")
    test = commands.add_parser("test", help="run one plugin's on-event once, locally", description=__doc__)
    test.add_argument("name", help="the plugin (its folder under <workspace>/plugins)")
    test.add_argument("event", help="a PRX event name (tool_call) or a subject (eva.custom.deploy)")
    test.add_argument("payload", nargs="?", default=None, help="the payload, a JSON object ('-': stdin; default: {})")
    test.add_argument("--session", default=None, help="session id of the event")
    add_workspace(test, "workspace with plugins/")
    test.set_defaults(func=run_test)


async def run_list(args: argparse.Namespace) -> int:
    from subscribers.plugins._manifest import PLUGINS_DIR
    from subscribers.plugins._plugin_set import PluginSet

    root = existing(args).path / PLUGINS_DIR
    plugins = PluginSet(root)
    plugins.check()
    if not plugins.plugins:
        print(f"no plugins in {root} (a folder per plugin, with plugin.toml)")
        return 0
    for name, state in sorted(plugins.plugins.items()):
        code = state.code
        if code is None:
            print(f"{name}: refused: {state.error}")
            continue
        m = code.manifest
        grants = ", ".join(f"{g.guest}={g.host}{' (rw)' if g.writable else ''}" for g in m.preopens) or "none"
        print(f"{name} {m.version} ({code.kind}, {m.wasm.name}): {', '.join(m.patterns) or 'no events'}")
        fuel = f", fuel {m.fuel:,}" if m.fuel is not None else ""
        print(f"  memory {m.memory_bytes // (1024 * 1024)} MiB, timeout {m.timeout_ms} ms{fuel}, directories {grants}")
        config = f", config {', '.join(key for key, _ in m.config)}" if m.config else ""
        print(f"  host interfaces {', '.join(sorted(m.interfaces))}{config}")
        if m.ignored:
            print(f"  ignored (no meaning on this host): {'; '.join(m.ignored)}")
        if state.error:
            print(f"  newest version refused (the one above runs): {state.error}")
    return 1 if any(state.code is None or state.error for state in plugins.plugins.values()) else 0


async def run_test(args: argparse.Namespace) -> int:
    from bus._core.subjects import matches, subject_for
    from bus._sandbox.outcome import HookOutcome
    from subscribers.plugins._errors import PluginError
    from subscribers.plugins._manifest import PLUGINS_DIR, load_manifest
    from subscribers.plugins._plugin_set import compile_plugin
    from subscribers.plugins.plugin_worker import call_plugin
    from subscribers.shell_hooks._hook_trial import make_event

    payload = read_json_object(args.payload if args.payload is not None else "{}", "the payload")
    event = make_event(subject_for(args.event), payload, args.session)
    folder = existing(args).path / PLUGINS_DIR / args.name
    if not folder.is_dir():
        raise PluginError(args.name, f"no folder {folder}")
    code = compile_plugin(load_manifest(folder))
    patterns = code.manifest.patterns
    pattern = next((p for p in patterns if matches(p, event.subject)), None)
    if pattern is None:
        print(f"note: {args.name} is not subscribed to {event.subject} ({', '.join(patterns) or 'no events'})")
    result = await call_plugin(code, event, pattern or event.subject)
    for topic, body in getattr(code.services, "published", []):
        print(f"  published {topic}: {body}")
    status = "Ok" if result.outcome is HookOutcome.OK else result.reason
    print(f"plugin {args.name} ({code.kind}) on {event.subject}: {result.outcome.value}: {status}")
    print(f"  in {result.duration * 1000:.1f} ms")
    return 0 if result.outcome is HookOutcome.OK else 1
