"""Cluster failover, repeated: how many of the agent's decisions came from the live handler.

    python bench/bench_failover.py [--runs 20]

Each run starts a 3-node cluster, serves a fail-closed guard on node 2, runs an
agent on node 1 that emits and intercepts steadily, and kills node 1 under that
load (the scenario of tests/transport/test_failover.py). Per run it prints the decisions
that came from the handler against all decisions, those the fail-closed mode
gave during the outage, and any continue nobody gave (there must be none).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table
from tests.support.failover_support import ALLOWED, cluster_failover, from_handler


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    rows, clean = [], 0
    for run in range(1, args.runs + 1):
        load = await cluster_failover()
        decisions = [d for _, d in load.decisions]
        leaked = sum(1 for d in decisions if d not in ALLOWED)
        closed = sum(1 for d in decisions if d.endswith(":fail-closed"))
        clean += leaked == 0
        handled = f"{from_handler(load)} of {len(decisions)}"
        rows.append([str(run), handled, str(closed), str(leaked)])
        print(f"run {run}: {handled} from the handler, {closed} fail-closed, {leaked} leaked", flush=True)
    print_table(
        f"cluster failover: {clean} of {args.runs} runs without a decision the handler did not give",
        rows,
        ["run", "from the handler", "fail-closed cancels", "continues nobody gave"],
    )
    return 0 if clean == args.runs else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
