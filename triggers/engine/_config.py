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
        publishers: [agent-eva]        # NATS users whose (vouched) events fire it; "*": anyone. Default: agent-<agent>

Every problem is a ConfigError naming the file, the trigger and the field; the fields and
their bounds are declared in triggers.engine._config_schema.Trigger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bus._core.catalog import warn_misspelt
from bus._core.errors import ConfigError, SubjectError
from bus._core.json_types import json_type
from bus._core.schema import convert
from bus._core.subjects import TOKEN_RE, normalise_pattern
from bus._runtime.config_files import parse_entries, read_yaml
from triggers.engine._config_schema import Trigger
from triggers.engine._filters import Condition, parse_conditions
from triggers.engine._template import Template

FILE_NAME: Final = "triggers.yaml"


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
    turn_timeout: float = 600.0
    enabled: bool = True
    #: The vouched publishers accepted (bus._core.envelope.Event.publisher); None: the default (see :meth:`accepts`).
    publishers: frozenset[str] | None = None
    source: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    def accepts(self, publisher: str | None, vouching: bool) -> bool:
        """Whether an event ``publisher`` published (None: unvouched) may fire this trigger.

        Named publishers are always enforced; ``"*"`` accepts anyone. Unset, the
        target agent's own user ``agent-<agent>`` is accepted, and anyone when
        the engine's own connection has no user (``vouching`` False: a server
        without users, where nothing can be vouched).
        """
        if self.publishers is None:
            return not vouching or publisher == agent_user(self.agent)
        return "*" in self.publishers or (publisher is not None and publisher in self.publishers)


def agent_user(agent: str) -> str:
    """The NATS user of agent ``agent`` in the shipped permissions (it serves ``hookbus.turn.<agent>``)."""
    return f"agent-{agent}"


def load(path: Path) -> dict[str, TriggerSpec]:
    """Parse and validate a triggers.yaml; a missing file means no triggers."""
    return parse(read_yaml(path, missing_ok=True), str(path))


def parse(doc: Any, where: str) -> dict[str, TriggerSpec]:
    """The triggers of a parsed triggers.yaml by name; an empty document means none."""
    specs = parse_entries(doc, where, "triggers", "trigger", parse_one, lambda spec: spec.name, empty_ok=True)
    return {spec.name: spec for spec in specs}


def parse_one(item: Any, where: str) -> TriggerSpec:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a mapping, not {json_type(item)}")
    if True in item and "on" not in item:
        # YAML 1.1 reads a bare `on:` key as the boolean true; it means the field "on".
        item = {("on" if key is True else key): value for key, value in item.items()}
    name = item.get("name")
    if isinstance(name, str) and TOKEN_RE.fullmatch(name):
        where = f"{where.rsplit(':', 1)[0]}: trigger {name!r}"
    entry = convert(item, Trigger, where, ConfigError)
    try:
        pattern = normalise_pattern(entry.on)
    except SubjectError as exc:
        raise ConfigError(f"{where}: field 'on': {exc}") from None
    warn_misspelt(entry.on, f"{where}: field 'on'")
    dedupe = entry.dedupe
    return TriggerSpec(
        name=entry.name,
        on=entry.on,
        pattern=pattern,
        prompt=Template.compile(entry.prompt, f"{where}: field 'prompt'"),
        agent=entry.agent,
        conditions=parse_conditions(entry.filter, f"{where}: field 'filter'"),
        cooldown_s=entry.cooldown_s,
        debounce_s=entry.debounce_s,
        max_in_flight=entry.max_in_flight,
        dedupe=Template.compile(dedupe, f"{where}: field 'dedupe'") if dedupe else None,
        dedupe_window_s=entry.dedupe_window_s,
        turn_timeout=entry.turn_timeout_s,
        enabled=entry.enabled,
        publishers=frozenset(entry.publishers) if entry.publishers is not None else None,
        source=dict(item),
    )
