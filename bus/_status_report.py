"""What ``hookbus status`` reports, as data: present processes by kind, and live modules with their handlers.

``hookbus status`` prints it; the console's status page shows the same dict.
"""

from __future__ import annotations

import time
from typing import Any

from bus._client import Bus
from bus._middleware.kernel.view import View
from bus._presence import Present, read_presence

#: The sections, in order: presence component kind -> heading.
SECTIONS = {
    "bus": "buses (hookbus up)",
    "agent": "agents",
    "worker": "workers",
    "trigger_engine": "trigger engines",
    "journal_sink": "journal sinks",
    "kernel": "kernels' own trust (managed handlers, trust-new)",
}


def process_rows(present: list[Present]) -> dict[str, list[dict[str, Any]]]:
    """Each component of each present process, by kind (sections in SECTIONS order)."""
    rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in SECTIONS}
    for item in sorted(present, key=lambda p: (p.record.process, p.key)):
        rec = item.record
        for part in rec.components:
            rows[part.kind].append(
                {
                    "name": part.name,
                    "detail": part.detail,
                    "process": rec.process,
                    "user": rec.user,
                    "where": f"{rec.host}:{rec.pid}",
                    "version": rec.version,
                    "last_seen_s": round(item.age_s, 1),
                    "silent": item.silent,
                }
            )
    return rows


def module_rows(view: View) -> list[dict[str, Any]]:
    """Each live module: its instances (version, where, last heard) and its handlers with trust state."""
    now = time.monotonic()  # the view keeps when each instance was heard of on the monotonic clock
    modules: dict[str, dict[str, Any]] = {}
    for ann, heard in view.instances.values():
        entry = modules.setdefault(ann.module, {"name": ann.module, "instances": [], "handlers": {}})
        entry["instances"].append(
            {"instance": ann.instance, "version": ann.version, "last_seen_s": round(now - heard, 1)}
        )
        for decl in ann.declarations:
            trust = view.trust_of(decl)
            entry["handlers"][decl.qualname] = {
                "name": decl.qualname,
                "stage": decl.stage,
                "fail_closed": decl.fail_closed,
                "state": trust.value,
                "runs": trust.runs,
            }
    return [
        {**entry, "handlers": sorted(entry["handlers"].values(), key=lambda h: h["name"])}
        for _, entry in sorted(modules.items())
    ]


async def status_report(bus: Bus, view: View) -> dict[str, Any]:
    """Everything ``hookbus status --json`` prints but the server's name: processes by kind, modules, problems."""
    present, problems = await read_presence(bus)
    return {**process_rows(present), "modules": module_rows(view), "problems": problems}
