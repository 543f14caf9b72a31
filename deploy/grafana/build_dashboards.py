"""Builds the Grafana dashboards in dashboards/ from the panel lists below.

    python deploy/grafana/build_dashboards.py

One place says what each panel shows, with a title, a unit and a legend; the
JSON files are generated from it and committed (a test keeps them in step,
and checks every query against a real Prometheus).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RATE = "$__rate_interval"


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    description: str = ""
    kind: str = "timeseries"


def rate(metric: str, by: str, where: str = "") -> str:
    selector = f"{metric}{{{where}}}" if where else metric
    return f"sum by ({by}) (rate({selector}[{RATE}]))"


def quantiles(metric: str, by: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        (f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket[{RATE}])))", f"p{int(q * 100)} {{{{{by}}}}}")
        for q in (0.5, 0.95, 0.99)
    )


def ratio(metric: str, by: str, bad: str) -> str:
    return f"{rate(metric, by, bad)} / {rate(metric, by)}"


# Fleet series (docs/metrics.md, "The fleet"): derived by `hookbus up` (and `hookbus metrics`) from what crosses
# the bus, so every panel has data when only they are scraped.
HOOKBUS = [
    Panel(
        "Events on the bus",
        "ops",
        ((rate("hookbus_fleet_events_total", "subject"), "{{subject}}"),),
        "Events that crossed the bus, per second, by subject (counted once by the fleet-metrics receivers).",
    ),
    Panel(
        "Events by agent",
        "ops",
        ((rate("hookbus_fleet_events_total", "agent"), "{{agent}}"),),
        "By the envelope's source (Bus(source=...)); unknown when an emitter does not name itself.",
    ),
    Panel(
        "Events delivered to handlers",
        "ops",
        ((rate("hookbus_fleet_events_delivered_total", "subject"), "{{subject}}"),),
        "As every process reports it.",
    ),
    Panel(
        "Events dropped by reason",
        "ops",
        (
            (rate("hookbus_fleet_events_dropped_total", "reason"), "{{reason}}"),
            (rate("hookbus_fleet_events_refused_total", "reason"), "refused by the receiver: {{reason}}"),
        ),
        "depth: recursion limit; oversize; disconnected: buffer full while NATS was away; malformed; slow_consumer; "
        "shed: a shell hook's queue full.",
    ),
    Panel(
        "Subscriber handler errors",
        "ops",
        ((rate("hookbus_fleet_handler_errors_total", "subject"), "{{subject}}"),),
    ),
    Panel(
        "Oversized events truncated",
        "ops",
        ((f"sum(rate(hookbus_fleet_events_truncated_total[{RATE}]))", "truncated"),),
    ),
    Panel(
        "NATS disconnects and reconnects",
        "short",
        (
            (f"sum(increase(hookbus_fleet_nats_disconnects_total[{RATE}]))", "disconnects"),
            (f"sum(increase(hookbus_fleet_nats_reconnects_total[{RATE}]))", "reconnects"),
        ),
    ),
]

MIDDLEWARE = [
    Panel(
        "Middleware decisions",
        "ops",
        ((rate("hookbus_fleet_middleware_decisions_total", "stage, decision"), "{{stage}} {{decision}}"),),
        "What each handler reaction read as, per stage, as the kernels report it.",
    ),
    Panel(
        "Middleware faults by outcome",
        "ops",
        ((rate("hookbus_fleet_middleware_calls_total", "outcome", 'outcome!="ok"'), "{{outcome}}"),),
        "timeout, failed (handler raised), absent (no responders), invalid (garbage reply), untrusted.",
    ),
    Panel(
        "Fail-closed cancels",
        "ops",
        ((rate("hookbus_fleet_middleware_fail_closed_cancels_total", "handler"), "{{handler}}"),),
        "A fail_closed handler's fault stopped the action.",
    ),
    Panel("Middleware latency by handler", "s", quantiles("hookbus_fleet_middleware_duration_seconds", "handler")),
]

# The asks queue (bus-wide, from the asks bucket and the journal; `max`: every `hookbus up` reads the same bucket).
ASKS = [
    Panel(
        "Asks pending",
        "short",
        (("max(hookbus_fleet_asks_pending)", "pending"),),
        "Calls held for an operator's answer (hookbus asks, the console's Asks page), bus-wide.",
    ),
    Panel(
        "Age of the oldest ask",
        "s",
        (("max(hookbus_fleet_asks_oldest_age_seconds)", "oldest waited"),),
        "How long the longest-held call has waited for a person: the queue's age.",
    ),
    Panel(
        "Share of its deadline an ask used",
        "percentunit",
        (("max(hookbus_fleet_asks_deadline_used_ratio)", "most used"),),
        "The pending ask closest to its deadline (then its handler's fail mode applies); the alert fires past half.",
    ),
    Panel(
        "Asks answered by kind, and expired",
        "ops",
        (
            (rate("hookbus_fleet_asks_answered_total", "kind"), "{{kind}}"),
            (f"sum(rate(hookbus_fleet_asks_expired_total[{RATE}]))", "expired (the fail mode applied)"),
        ),
        "allow, deny, edit as kernels journal each ask's end; expired: nobody answered before the deadline.",
    ),
]

# Who decided, for operators and auditors: each handler's vetoes, its decision latency, its faults, and the calls
# waiting for a person (docs/journal.md says who decided each single call).
GOVERNANCE = [
    Panel(
        "Veto rate by handler",
        "percentunit",
        (
            (
                ratio("hookbus_fleet_middleware_decisions_total", "handler", 'decision="cancel"'),
                "{{handler}}",
            ),
        ),
        "The share of a handler's decisions that cancelled the call (a fault read as cancel counts: fail-closed).",
    ),
    Panel(
        "Vetoes by handler",
        "ops",
        ((rate("hookbus_fleet_middleware_decisions_total", "handler", 'decision="cancel"'), "{{handler}}"),),
        "Calls each handler cancelled, per second.",
    ),
    Panel(
        "Decision latency by handler",
        "s",
        quantiles("hookbus_fleet_middleware_duration_seconds", "handler"),
        "p50, p95 and p99 of each handler's time to decide, as its kernel measured it.",
    ),
    Panel(
        "Faults by kind and handler",
        "ops",
        (
            (
                rate("hookbus_fleet_middleware_calls_total", "outcome, handler", 'outcome!="ok"'),
                "{{outcome}} {{handler}}",
            ),
        ),
        "timeout, failed, absent, invalid, untrusted, oversize, shutdown, skipped: each read by its fail mode.",
    ),
    Panel(
        "Asks pending",
        "short",
        (("max(hookbus_fleet_asks_pending)", "pending"),),
        "Calls held for an operator's answer, bus-wide.",
    ),
    Panel(
        "Age of the oldest pending ask",
        "s",
        (("max(hookbus_fleet_asks_oldest_age_seconds)", "oldest waited"),),
        "How long the longest-held call has waited for a person.",
    ),
]

HOOKS = [
    Panel("Shell hook runs by hook", "ops", ((rate("hookbus_fleet_shell_hook_runs_total", "hook"), "{{hook}}"),)),
    Panel(
        "Shell hook failures, timeouts, refusals",
        "ops",
        (
            (f"sum(rate(hookbus_fleet_shell_hook_failures_total[{RATE}]))", "failures"),
            (f"sum(rate(hookbus_fleet_shell_hook_timeouts_total[{RATE}]))", "timeouts"),
            (f"sum(rate(hookbus_fleet_shell_hook_refusals_total[{RATE}]))", "refusals"),
        ),
        "Failures: non-zero exit or signal. Timeouts: stopped at timeout_ms. Refusals: security rules.",
    ),
    Panel("Shell hook duration by hook", "s", quantiles("hookbus_fleet_shell_hook_duration_seconds", "hook")),
    Panel(
        "Shell hook load",
        "short",
        (
            ("sum(hookbus_shell_hooks_running)", "running"),
            ("sum(hookbus_shell_events_queued)", "queued"),
            (f'sum(increase(hookbus_fleet_events_dropped_total{{reason="shed"}}[{RATE}]))', "shed"),
        ),
        "Running and queued: the workers' own gauges (scrape `hookbus worker` processes too); "
        "shed: every worker's, as its Bus reports.",
    ),
    Panel("Triggers fired", "ops", ((rate("hookbus_fleet_trigger_fired_total", "trigger"), "{{trigger}}"),)),
    Panel(
        "Trigger suppressions by reason",
        "ops",
        ((rate("hookbus_fleet_trigger_suppressed_total", "reason"), "{{reason}}"),),
        "publisher, filter, depth (recursion limit), debounce, dedupe, cooldown, in_flight, disabled.",
    ),
]

AGENTS = [
    Panel(
        "LLM latency by model",
        "s",
        quantiles("hookbus_agent_llm_duration_seconds", "model"),
        "From llm_response events (duration_ms).",
    ),
    Panel(
        "LLM error ratio by model",
        "percentunit",
        ((ratio("hookbus_agent_llm_responses_total", "model", 'outcome="error"'), "{{model}}"),),
    ),
    Panel(
        "LLM responses by provider", "ops", ((rate("hookbus_agent_llm_responses_total", "provider"), "{{provider}}"),)
    ),
    Panel("Tool calls by tool", "ops", ((rate("hookbus_agent_tool_calls_total", "tool"), "{{tool}}"),)),
    Panel(
        "Tool failure ratio by tool",
        "percentunit",
        ((ratio("hookbus_agent_tool_calls_total", "tool", 'outcome="error"'), "{{tool}}"),),
    ),
    Panel("Turns by outcome", "ops", ((rate("hookbus_agent_turns_total", "outcome"), "{{outcome}}"),)),
    Panel("Errors by component", "ops", ((rate("hookbus_agent_errors_total", "component"), "{{component}}"),)),
]

# prometheus-nats-exporter (-varz -connz -routez -subz) metric names.
NATS = [
    Panel(
        "Messages in / out",
        "ops",
        (
            (f"sum by (server_id) (rate(gnatsd_varz_in_msgs[{RATE}]))", "in {{server_id}}"),
            (f"sum by (server_id) (rate(gnatsd_varz_out_msgs[{RATE}]))", "out {{server_id}}"),
        ),
    ),
    Panel(
        "Bytes in / out",
        "Bps",
        (
            (f"sum by (server_id) (rate(gnatsd_varz_in_bytes[{RATE}]))", "in {{server_id}}"),
            (f"sum by (server_id) (rate(gnatsd_varz_out_bytes[{RATE}]))", "out {{server_id}}"),
        ),
    ),
    Panel("Client connections", "short", (("sum by (server_id) (gnatsd_varz_connections)", "{{server_id}}"),)),
    Panel("Slow consumers", "short", (("sum by (server_id) (gnatsd_varz_slow_consumers)", "{{server_id}}"),)),
    Panel("Cluster routes", "short", (("sum by (server_id) (gnatsd_varz_routes)", "{{server_id}}"),)),
    Panel("Server memory", "bytes", (("sum by (server_id) (gnatsd_varz_mem)", "{{server_id}}"),)),
]

DASHBOARDS = {
    "hookbus": ("hookbus: bus, middleware, asks, hooks", HOOKBUS + MIDDLEWARE + ASKS + HOOKS),
    "agents": ("hookbus: agents", AGENTS),
    "governance": ("hookbus: governance (who decided)", GOVERNANCE),
    "nats": ("hookbus: NATS servers", NATS),
}


def panel_json(index: int, panel: Panel) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True, "calcs": ["mean", "max"]}
        },
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "expr": expr,
                "legendFormat": legend,
                "datasource": {"type": "prometheus", "uid": "prometheus"},
            }
            for i, (expr, legend) in enumerate(panel.targets)
        ],
    }


def dashboard_json(uid: str, title: str, panels: list[Panel]) -> dict[str, Any]:
    return {
        "uid": f"hookbus-{uid}",
        "title": title,
        "tags": ["hookbus"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "panels": [panel_json(i, p) for i, p in enumerate(panels)],
    }


def render() -> dict[str, str]:
    """File name -> JSON text for every dashboard."""
    return {
        f"{uid}.json": json.dumps(dashboard_json(uid, title, panels), indent=2) + "\n"
        for uid, (title, panels) in DASHBOARDS.items()
    }


if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "dashboards"
    for name, text in render().items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
