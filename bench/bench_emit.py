"""``hookbus emit`` as hooks run it: one process per event, against a bare ``python3 -c pass``.

    python bench/bench_emit.py [--calls 20]

Each round runs, in turn, the interpreter doing nothing and ``hookbus emit``
publishing one event to a real nats-server (the embedded one), both with
this interpreter and environment, and times each process from start to exit.
Prints the median of each over ``--calls`` rounds and their ratio (target
<= 4x), and, for comparison, the full client's path (``hookbus -v emit``,
what every emit cost before the one-shot path). ``hookbus`` is run the way
its console script runs it (``from bus._cli import main``), from this
checkout. Also checks that every event arrived, so a failing emit cannot
look fast.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import median, print_table, verdict  # noqa: E402
from bus import Bus, NatsServer  # noqa: E402
from bus.testing import EventRecorder  # noqa: E402

#: What the installed ``hookbus`` script does, run from this checkout.
CONSOLE_SCRIPT = "import sys; from bus._cli import main; sys.exit(main())"
SUBJECT = "prx.lifecycle.tool_call"
PAYLOAD = '{"tool": "shell", "success": true, "output": "ok"}'
TARGET = 4.0


def timed(command: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning ``command`` to its exit (it must succeed)."""
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


async def measure(calls: int, url: str) -> tuple[list[float], list[float], list[float]]:
    env = {**os.environ, "NATS_URL": url}
    env.pop("HOOKBUS_DEPTH", None)
    bare = [sys.executable, "-c", "pass"]
    emit = [sys.executable, "-c", CONSOLE_SCRIPT, "emit", SUBJECT, PAYLOAD]
    full = [sys.executable, "-c", CONSOLE_SCRIPT, "-v", "emit", SUBJECT, PAYLOAD]
    async with Bus(url, name="bench-emit-receiver") as bus:
        received = EventRecorder()
        await bus.subscribe(SUBJECT, received)
        await bus.flush()
        timed(emit, env)  # warm the file cache and the byte-code of both
        timed(bare, env)
        bare_s, emit_s, full_s = [], [], []
        for _ in range(calls):
            bare_s.append(await asyncio.to_thread(timed, bare, env))
            emit_s.append(await asyncio.to_thread(timed, emit, env))
            full_s.append(await asyncio.to_thread(timed, full, env))
        await received.wait_for(2 * calls + 1, timeout=10)
    return bare_s, emit_s, full_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20, help="processes of each kind (default: 20)")
    args = parser.parse_args()
    with NatsServer() as server:
        bare_s, emit_s, full_s = asyncio.run(measure(args.calls, server.url))
    ratio = median(emit_s) / median(bare_s)
    print_table(
        f"hookbus emit, one process per event ({args.calls} calls each, medians)",
        [
            ["python3 -c pass", f"{median(bare_s) * 1000:.1f}", "1.00"],
            ["hookbus emit", f"{median(emit_s) * 1000:.1f}", f"{ratio:.2f}"],
            ["hookbus -v emit (full client)", f"{median(full_s) * 1000:.1f}", f"{median(full_s) / median(bare_s):.2f}"],
        ],
        ["process", "median ms (this run)", "x bare python"],
    )
    print(f"\nratio {ratio:.2f}: {verdict(ratio, TARGET, higher_is_better=False)}")


if __name__ == "__main__":
    main()
