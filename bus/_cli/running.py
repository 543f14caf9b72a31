"""How a command runs: its errors as one line on stderr, its log lines, the hint when no server answers."""

from __future__ import annotations

import sys
from collections.abc import Callable


def configure_logging(verbosity: int) -> None:
    """Log lines on stderr, prefixed ``hookbus:``; warnings only unless -v."""
    import logging

    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="hookbus: %(levelname)s: %(message)s", stream=sys.stderr)
    # nats-py logs every failed reconnect attempt with a traceback; hookbus reports them itself.
    logging.getLogger("nats").setLevel(logging.CRITICAL if verbosity < 2 else logging.DEBUG)


#: What a command that cannot reach NATS adds to the ConnectError, when nobody listens at the address.
NO_SERVER_HINT = "is 'hookbus up' running? set NATS_URL or --nats-url"


def guarded(command: Callable[[], int]) -> int:
    """Run a command: errors hookbus raises on purpose become one line on stderr and exit status 1."""
    from bus._core.errors import ConnectError, HookbusError

    try:
        return command()
    except ConnectError as exc:
        print(f"hookbus: {exc}: {NO_SERVER_HINT}" if exc.refused else f"hookbus: error: {exc}", file=sys.stderr)
        return 1
    except HookbusError as exc:
        print(f"hookbus: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head and the like
        sys.stderr.close()
        return 0
