"""bench/bench_scale.py --quick runs its worker curves and prints them (the bench stays out of the suite otherwise)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_hooks_and_fleet_curves_print_tables_from_1_0_with_a_verdict() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_scale.py"), "--quick", "--only", "hooks,fleet"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for title in ("hooks.json: keys, one action each", "hooks.json: actions on one key", "fleet metrics: "):
        table = out.split(f"## {title}", 1)[1]
        first = table.splitlines()[4]  # title, blank, header, rule, first row
        assert "| 1.00 " in first, first
    verdicts = re.findall(r"^(hooks|fleet metrics)\b.*-> (linear|GROWS FASTER THAN THE WORK)$", out, re.M)
    assert len(verdicts) == 6, out
    # the fleet receiver counted every event of every row, and the label caps held the series
    fleet = out.split("## fleet metrics: ", 1)[1].split("\nfleet metrics,", 1)[0]
    rows = [line for line in fleet.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 4
    assert all(row.split("|")[8].strip() == "1.0000" for row in rows), fleet
    assert all(int(row.split("|")[4].strip().replace(",", "")) < 1000 for row in rows), fleet
