"""Reading an agent YAML (``hookbus agent --config agents/eva.yaml``), agent_os's way: ``hook_files:``.

agent_os attaches hooks to one agent by listing YAML files in its
``agent.yaml`` (``hook_files:``, paths relative to that file), and to every
agent from the shared folder (``global: true``). Here a hook file is a rule
file (docs/rules.md): the ones an agent YAML lists go to that agent's Bus as
``--rules`` would, so they apply to this agent alone, whatever their
``global:`` says (that flag decides which kernels take a file pushed to the
bus). An entry that is a bare stem (no ``/``, no ``.yaml``) names a
``global: false`` file of the bus's ``hookbus_rules`` bucket instead.

``timeouts.hook_secs`` (agent_os's key) is the longest this agent's kernel
waits for one handler; it never exceeds the operator's ceiling
(``<workspace>/middleware.yaml``), and a hook-turn may declare up to it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bus._core.errors import ConfigError
from bus._core.schema import convert
from bus._middleware.kernel.intercept import MiddlewareOptions
from bus._middleware.rules.book import split_sources
from bus._runtime.config_files import read_yaml
from triggers.agent._config_schema import AgentFile
from triggers.agent._hook_turn import HookTurnSpec

log = logging.getLogger("hookbus.agent")


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """What an agent YAML sets: its name and system prompt (if it gives them), its rule files resolved."""

    name: str | None
    system: str | None
    rules: tuple[str | Path, ...]
    #: ``timeouts.hook_secs``: the longest the agent's kernel waits for one handler (None: the ceiling).
    hook_secs: float | None = None


def load(path: Path) -> AgentSettings:
    """Parse and check an agent YAML; a rule file path is relative to it and must exist (ConfigError naming it)."""
    doc = read_yaml(path, missing_ok=False)
    parsed = convert({} if doc is None else doc, AgentFile, str(path), ConfigError)
    files, stems = split_sources(parsed.hook_files)
    rules: list[str | Path] = []
    for entry in files:
        full = (path.parent / entry).resolve()
        if not full.is_file():
            raise ConfigError(f"{path}: hook_files: {entry} is not a file (paths are relative to {path.parent})")
        rules.append(full)
    return AgentSettings(parsed.name, parsed.system, (*rules, *sorted(stems)), parsed.timeouts.hook_secs)


def apply(hook_secs: float | None, options: MiddlewareOptions, where: str) -> None:
    """Set the agent's bound on its kernel's options (above the operator's ceiling: the ceiling, with a warning)."""
    if hook_secs is None:
        return
    if hook_secs > options.timeout_ceiling:
        log.warning(
            "%s: timeouts.hook_secs %gs is over the operator's ceiling %gs (middleware.yaml): %gs it is",
            where, hook_secs, options.timeout_ceiling, options.timeout_ceiling,
        )  # fmt: skip
    options.hook_secs = hook_secs


def check_hook_turns(specs: list[HookTurnSpec], options: MiddlewareOptions, where: str) -> None:
    """ConfigError for a hook-turn that declares longer than the agent's kernel would wait for it."""
    bound = options.handler_wait(float("inf"))
    for spec in specs:
        if spec.timeout > bound:
            raise ConfigError(
                f"{where}: hook-turn {spec.name!r}: timeout {spec.timeout:g}s is over this agent's bound {bound:g}s "
                "(timeouts.hook_secs in the agent YAML, within the operator's ceiling in middleware.yaml)"
            )
