"""The kernel's view rebuild: one announcement taken in with 1, 100 and 1,000 handlers announced in all.

    python bench/bench_view.py [--rounds 5]

A view (no server: fed directly, as its watch would) takes in announcements
of ``n`` handlers in all (at most 250 per module, under the cap), each
checked in full (new bytes every round), and rebuilds its chains. Printed: time per handler announced for each ``n``,
and the ratio to the same per-handler time at ``n`` = 100, measured in the
same run: flat means the rebuild grows linearly with what is announced (it
used to recompute every announcement's identities per handler placed: a
1,000-handler view took seconds). The baseline row decodes the same
announcements' JSON (orjson), the least any receiver does with them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus._middleware.kernel.view import View
from bus._middleware.registry import parse_announcement
from bus._middleware.trust import Managed

PER_MODULE = 250
SIZES = (1, 100, 1000)


def announcement(module: str, count: int, version: int) -> bytes:
    handlers = [
        {"module": module, "name": f"h{i}", "stage": f"bench.s{i % 7}", "code": f"v{version}"} for i in range(count)
    ]
    return orjson.dumps(
        {"module": module, "instance": "i1", "heartbeat": 60.0, "handlers": handlers, "at": time.time()}
    )


def modules_of(total: int) -> list[tuple[str, int]]:
    out = []
    index = 0
    while total > 0:
        out.append((f"m{index}", min(PER_MODULE, total)))
        total -= PER_MODULE
        index += 1
    return out


def one_round(total: int, version: int) -> tuple[float, float]:
    """(seconds for a view to take in announcements of ``total`` handlers and rebuild, seconds to decode them)."""
    view = View(None, managed=Managed(frozenset()), trust_new=False, aliases={})  # type: ignore[arg-type]
    view._started = True  # fed directly: no watches, no sweep
    datas = [(f"{module}.i1", announcement(module, count, version)) for module, count in modules_of(total)]
    gc.collect()  # what the rounds before left is not this rebuild's cost
    start = time.perf_counter()
    for key, data in datas:
        view.instances[key] = (parse_announcement(data, key), time.monotonic())
    view._rebuild()
    took = time.perf_counter() - start
    start = time.perf_counter()
    for _, data in datas:
        orjson.loads(data)
    return took, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.set_event_loop(asyncio.new_event_loop())  # the view makes an asyncio.Event per rebuild
    per_handler: dict[int, float] = {}
    decode: dict[int, float] = {}
    for total in SIZES:
        takes = [one_round(total, version) for version in range(args.rounds)]  # new bytes each: checked in full
        per_handler[total] = median([took for took, _ in takes]) / total
        decode[total] = median([dec for _, dec in takes]) / total
    rows = []
    for total in SIZES:
        ratio = per_handler[total] / per_handler[100]
        rows.append(
            [
                str(total),
                f"{per_handler[total] * 1e6:.1f} µs",
                f"{decode[total] * 1e6:.2f} µs",
                f"{per_handler[total] / decode[total]:.0f}x",
                f"{ratio:.2f}",
                verdict(ratio, 2.0, higher_is_better=False) if total > 100 else "",
            ]
        )
    print_table(
        "view rebuild after one announcement, per handler announced",
        rows,
        ["handlers", "rebuild / handler", "JSON decode / handler", "rebuild / decode", "vs 100", "linear"],
    )


if __name__ == "__main__":
    main()
