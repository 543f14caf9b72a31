"""Shared by the benchmarks: a table printer, rounds, RSS readings.

Every benchmark compares hookbus against a baseline measured in the same run on
the same server (raw nats-py, or a bare loop) and prints ratios; absolute times
move from run to run and machine to machine.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def rss_mib(pid: int | str = "self") -> tuple[float, float]:
    """(current RSS, peak RSS) of a process in MiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def peak_rss_mib_self() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def print_table(title: str, rows: Sequence[Sequence[str]], header: Sequence[str]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    print(f"\n## {title}\n")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


def verdict(ratio: float, target: float, higher_is_better: bool = True) -> str:
    ok = ratio >= target if higher_is_better else ratio <= target
    sign = ">=" if higher_is_better else "<="
    return f"{'meets' if ok else 'MISSES'} target {sign} {target}"


def start_up(*args: str, quiet: bool = False) -> tuple[subprocess.Popen[str], str]:
    """``hookbus up *args`` in a child process, read up to its ``ready`` line: (the process, what it printed by then).

    The caller's NATS_URL is not passed on (``up`` starts its own server unless told ``--nats-url``);
    ``quiet`` drops its stderr.
    """
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    command = [sys.executable, "-m", "bus._cli", "up", *args]
    stderr = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("ready"):
            break
    return proc, "".join(lines)
