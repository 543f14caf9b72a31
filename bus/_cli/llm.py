"""``hookbus llm``: serve the built-in model (an OpenAI-compatible chat server with deterministic answers)."""

from __future__ import annotations

import argparse

from bus._cli.common import stop_on_signals
from bus._core.errors import ConfigError

DEFAULT_PORT = 11435


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "llm",
        help="serve the built-in model: an OpenAI-compatible chat server with deterministic answers",
        description=(
            "Serve the built-in model at http://HOST:PORT/v1 (POST /chat/completions, streaming included; "
            "GET /models) until Ctrl-C: the same conversation gets the same answer everywhere, for the tour, "
            "the demo and tests of your own triggers. 'hookbus agent --llm-url builtin:' starts one inside the "
            "agent instead."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT}; 0: any)")
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from triggers.agent._builtin_model import BuiltinModel

    stop = stop_on_signals()
    try:
        model = await BuiltinModel(args.host, args.port).start()
    except OSError as exc:
        raise ConfigError(
            f"cannot serve the built-in model on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    try:
        print(f"built-in model serving at {model.url} (hookbus agent --llm-url {model.url})", flush=True)
        await stop.wait()
    finally:
        await model.stop()
    return 0
