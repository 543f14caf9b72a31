"""Rule guards benchmark: rules evaluated in the kernel, per intercept, against an undeclared stage and a module.

    python bench/bench_rules.py [--calls 3000]

One Bus on an embedded nats-server, with its own rule file (local rules run
without approval). Stages, each timed over the same sequential calls:

- undeclared: no handler at all (the floor: no network, no chain);
- 1 rule: one rule whose condition is evaluated (false: continue);
- 100 rules: 100 rules on the stage, each one evaluated (the worst case), their
  conditions evaluated as one run (bus._middleware.rules.runs);
- 100 rules, one by one: the same stage with the run disabled, one CEL
  evaluation per rule (the kernel's path before runs: the same-run baseline);
- 100 rules, indexed: 100 rules matching 100 different tools, the call's tool
  matches one (what the matchers spare);
- remote: one module handler (continue) served over NATS by this process.

Prints microseconds per call and ratios against the undeclared stage and the
remote handler, measured in the same run; and CEL evaluations per second of
one core in the 100-rule case. Target: 100 rules at most 30 µs per call.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, print_table, verdict
from bus import Bus, Continue, Module, NatsServer
from bus._middleware.kernel import ruling
from bus.testing import serving, wait_for_chain

PAYLOAD = {"name": "shell", "input": {"command": "ls -la /srv/project"}, "call_id": "c-0001"}
CONDITION = 'payload.input.command.contains("rm -rf")'
TARGET_US = 30.0


def rule_text() -> str:
    lines = ["rules:"]

    def rule(name: str, stage: str, match: str | None = None) -> None:
        lines.extend([f"  - name: {name}", f"    stage: {stage}", f"    if: '{CONDITION}'", "    then: cancel"])
        if match:
            lines.append(f"    match: {match}")

    rule("one", "bench.one")
    for index in range(100):
        rule(f"all{index}", "bench.hundred")
        rule(f"tool{index}", "bench.indexed", "shell" if index == 50 else f"tool{index}")
    return "\n".join(lines) + "\n"


async def timed(bus: Bus, stage: str, calls: int, rounds: int = 5) -> float:
    """Median over rounds of the mean microseconds per sequential intercept."""
    for _ in range(200):  # warm up
        await bus.intercept(stage, PAYLOAD)
    results = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            decision = await bus.intercept(stage, PAYLOAD)
        results.append((time.perf_counter() - started) / calls * 1e6)
        assert isinstance(decision, Continue), decision
    return median(results)


def remote_module() -> Module:
    module = Module("bench_remote")

    @module.stage("bench.remote")
    async def allow(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    return module


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as folder, NatsServer() as server:
        path = Path(folder) / "bench.yaml"
        path.write_text(rule_text())
        async with (
            serving(remote_module(), server.url),
            Bus(server.url, rules=[path], managed=["bench_remote.allow"]) as bus,
        ):
            await wait_for_chain(bus, "bench.remote", ["bench_remote.allow"])
            floor = await timed(bus, "bench.none", calls)
            one = await timed(bus, "bench.one", calls)
            hundred = await timed(bus, "bench.hundred", calls)
            together = ruling.run_of
            ruling.run_of = lambda links, start: None  # type: ignore[assignment]  # one evaluation per rule
            try:
                single = await timed(bus, "bench.hundred", calls)
            finally:
                ruling.run_of = together
            indexed = await timed(bus, "bench.indexed", calls)
            remote = await timed(bus, "bench.remote", max(calls // 5, 200))
    rows = [
        ["undeclared stage", f"{floor:.2f}", "1.00", f"{floor / remote:.3f}", ""],
        ["1 rule", f"{one:.2f}", f"{one / floor:.1f}", f"{one / remote:.3f}", ""],
        [
            "100 rules, all evaluated",
            f"{hundred:.2f}",
            f"{hundred / floor:.1f}",
            f"{hundred / remote:.3f}",
            f"{'meets' if hundred <= TARGET_US else 'MISSES'} target <= {TARGET_US:g} us",
        ],
        ["100 rules, one by one (baseline)", f"{single:.2f}", f"{single / floor:.1f}", f"{single / remote:.3f}", ""],
        [
            "100 rules, one matches",
            f"{indexed:.2f}",
            f"{indexed / floor:.1f}",
            f"{indexed / remote:.3f}",
            f"{'meets' if indexed <= TARGET_US else 'MISSES'} target <= {TARGET_US:g} us",
        ],
        ["1 remote module handler", f"{remote:.2f}", f"{remote / floor:.1f}", "1.000", ""],
    ]
    print_table(
        f"Rules per intercept ({calls} sequential calls, median of 5 rounds)",
        rows,
        ["stage", "us/call", "x undeclared", "x remote handler", "target"],
    )
    faster = single / hundred
    print(f"\n100 rules as one run against one by one: {verdict(faster, 1.0)} ({faster:.1f}x faster)")
    evaluations = 100 / (hundred / 1e6)
    print(
        f"\nCEL evaluations per second, one core (100-rule stage): {evaluations:,.0f} "
        f"({verdict(evaluations / 100_000, 1.0)} of 100,000)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    asyncio.run(main(parser.parse_args().calls))
