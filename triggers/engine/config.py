"""triggers.yaml: what starts an agent turn, and when not to.

    triggers:
      - name: spend-check              # [A-Za-z0-9_-]+, unique
        on: eva.spend.day              # subject pattern (NATS or PRX-style)
        filter:                        # optional; every condition must hold
          payload.total: {">": 10}
          payload.currency: USD        # a bare value means ==
        prompt: "We spent {payload.total} {payload.currency} today. Where did it go? Say if it is expensive."
        agent: eva                     # the agent whose turn starts
        cooldown_s: 60                 # at most one firing per 60 s
        debounce_s: 0                  # wait for this much quiet, then fire with the last event
        max_in_flight: 1               # turns of this trigger running at once
        dedupe: "{payload.day}"        # fire once per rendered key ...
        dedupe_window_s: 86400         # ... within this window
        turn_timeout_s: 600            # a turn not reported done by then no longer counts as in flight
        enabled: true

Every problem is a ConfigError naming the file, the trigger and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from bus.core.errors import ConfigError, SubjectError
from bus.core.subjects import TOKEN_RE, normalise_pattern
from triggers.engine.filters import Condition, parse_conditions
from triggers.engine.template import Template

FILE_NAME: Final = "triggers.yaml"

_NUMBER_FIELDS: Final = {"cooldown_s": 0.0, "debounce_s": 0.0, "dedupe_window_s": 3600.0, "turn_timeout_s": 600.0}
_KNOWN: Final = {"name", "on", "filter", "prompt", "agent", "max_in_flight", "dedupe", "enabled", *_NUMBER_FIELDS}


@dataclass(frozen=True)
class TriggerSpec:
    """One validated trigger."""

    name: str
    on: str
    pattern: str
    prompt: Template
    agent: str
    conditions: tuple[Condition, ...] = ()
    cooldown_s: float = 0.0
    debounce_s: float = 0.0
    max_in_flight: int = 1
    dedupe: Template | None = None
    dedupe_window_s: float = 3600.0
    turn_timeout_s: float = 600.0
    enabled: bool = True
    source: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)


def load(path: Path) -> dict[str, TriggerSpec]:
    """Parse and validate a triggers.yaml; a missing file means no triggers."""
    if not path.exists():
        return {}
    try:
        doc = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse(doc, str(path))


def parse(doc: Any, where: str) -> dict[str, TriggerSpec]:
    if doc is None:
        return {}
    if not isinstance(doc, dict) or set(doc) - {"triggers"}:
        raise ConfigError(f"{where}: the top level must be a mapping with one key, 'triggers'")
    items = doc.get("triggers") or []
    if not isinstance(items, list):
        raise ConfigError(f"{where}: 'triggers' must be a list")
    specs: dict[str, TriggerSpec] = {}
    for index, item in enumerate(items):
        spec = parse_one(item, f"{where}: trigger #{index + 1}")
        if spec.name in specs:
            raise ConfigError(f"{where}: trigger {spec.name!r} is defined twice")
        specs[spec.name] = spec
    return specs


def parse_one(item: Any, where: str) -> TriggerSpec:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a mapping, not {type(item).__name__}")
    if True in item and "on" not in item:
        # YAML 1.1 reads a bare `on:` key as the boolean true; it means the field "on".
        item = {("on" if key is True else key): value for key, value in item.items()}
    name = item.get("name")
    if isinstance(name, str) and TOKEN_RE.fullmatch(name):
        where = f"{where.rsplit(':', 1)[0]}: trigger {name!r}"
    else:
        raise ConfigError(f"{where}: field 'name' must be a string of [A-Za-z0-9_-]+")
    unknown = set(item) - _KNOWN
    if unknown:
        raise ConfigError(f"{where}: unknown field {sorted(map(str, unknown))[0]!r}")
    for required in ("on", "prompt", "agent"):
        if not isinstance(item.get(required), str) or not item[required]:
            raise ConfigError(f"{where}: field {required!r} is required and must be a non-empty string")
    try:
        pattern = normalise_pattern(item["on"])
    except SubjectError as exc:
        raise ConfigError(f"{where}: field 'on': {exc}") from None
    if not TOKEN_RE.fullmatch(item["agent"]):
        raise ConfigError(f"{where}: field 'agent' must match [A-Za-z0-9_-]+")
    numbers = {key: _number(item, key, default, where) for key, default in _NUMBER_FIELDS.items()}
    in_flight = item.get("max_in_flight", 1)
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        raise ConfigError(f"{where}: field 'max_in_flight' must be a whole number >= 1")
    enabled = item.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}: field 'enabled' must be true or false")
    dedupe = item.get("dedupe")
    if dedupe is not None and not isinstance(dedupe, str):
        raise ConfigError(f"{where}: field 'dedupe' must be a string template")
    return TriggerSpec(
        name=name,
        on=item["on"],
        pattern=pattern,
        prompt=Template.compile(item["prompt"], f"{where}: field 'prompt'"),
        agent=item["agent"],
        conditions=parse_conditions(item.get("filter"), f"{where}: field 'filter'"),
        max_in_flight=in_flight,
        dedupe=Template.compile(dedupe, f"{where}: field 'dedupe'") if dedupe else None,
        enabled=enabled,
        source=dict(item),
        **numbers,
    )


def _number(item: dict[str, Any], key: str, default: float, where: str) -> float:
    value = item.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}: field {key!r} must be a number of seconds >= 0")
    return float(value)
