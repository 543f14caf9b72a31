"""hookbus's config files declared as types: each entry with its fields and their bounds.

Loaders parse the file (YAML, JSON), then :func:`bus.core.schema.convert` the
document to these types, so every problem names the file, the entry and the
field. Rules that need code (a stage name's grammar, duplicate names) stay in
the loaders.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
#: A name that is also a NATS subject token.
Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+$")]
#: One string or a list of them (``match: shell`` or ``match: [shell, write_file]``).
Strings = NonEmpty | list[NonEmpty]


#: How long a hook-turn waits for the model unless its entry says otherwise.
HOOK_TURN_TIMEOUT = 20.0


HookTurnTimeout = Annotated[float, msgspec.Meta(gt=0, le=30)]


class HookTurn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of hook_turns.yaml: a middleware handler that asks a model."""

    name: Name
    stage: str
    prompt: Annotated[str, msgspec.Meta(pattern=r"\S")]
    match: Strings | msgspec.UnsetType = msgspec.UNSET  # absent: every call of the stage
    fail_closed: bool = False
    #: Seconds; unset: HOOK_TURN_TIMEOUT. ``timeout_s`` is the older spelling, still read (not both).
    timeout: HookTurnTimeout | msgspec.UnsetType = msgspec.UNSET
    timeout_s: HookTurnTimeout | msgspec.UnsetType = msgspec.UNSET
    before: Strings = []
    after: Strings = []
    model: NonEmpty | None = None


class HookTurnsFile(msgspec.Struct, forbid_unknown_fields=True):
    """hook_turns.yaml: one key, ``hook_turns``, holding a list of entries (checked one by one)."""

    hook_turns: list[object]


Seconds = Annotated[float, msgspec.Meta(ge=0)]


class Trigger(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of triggers.yaml: which events start a turn on which agent, and how often at most."""

    name: Name
    on: NonEmpty
    prompt: NonEmpty
    agent: Name
    filter: Any = None  # conditions: their grammar is checked by triggers.engine.filters
    cooldown_s: Seconds = 0.0
    debounce_s: Seconds = 0.0
    max_in_flight: Annotated[int, msgspec.Meta(ge=1)] = 1
    dedupe: str | None = None
    dedupe_window_s: Seconds = 3600.0
    turn_timeout_s: Seconds = 600.0
    enabled: bool = True
    #: The NATS users whose events may fire it, as their subjects vouch (docs/triggers.md); ``"*"`` accepts any
    #: publisher, vouched or not. Unset: the target agent's own user, ``agent-<agent>``.
    publishers: list[Annotated[str, msgspec.Meta(pattern=r"^([A-Za-z0-9_-]+|\*)$")]] | None = None


#: A shell hook's timeout when neither its action nor the file gives one (PRX's documented default).
HOOK_TIMEOUT_MS = 30_000
#: Longest shell-hook timeout accepted (a day): anything longer is a typo in units.
HOOK_MAX_TIMEOUT_MS = 24 * 3600 * 1000
TimeoutMs = Annotated[int, msgspec.Meta(ge=1, le=HOOK_MAX_TIMEOUT_MS)]


class Isolation(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """How a process the bus starts is fenced in (bubblewrap namespaces plus rlimits): see docs/security.md.

    Given at all, it means isolated: no network unless ``network`` is true, a
    read-only file system but for the working directory, private /proc and PID
    namespace, and the three limits below.
    """

    network: bool = False
    memory_mb: Annotated[int, msgspec.Meta(ge=16, le=1 << 20)] = 512  # address space (RLIMIT_AS)
    cpu_s: Annotated[int, msgspec.Meta(ge=1, le=24 * 3600)] = 60  # CPU time (RLIMIT_CPU)
    max_procs: Annotated[int, msgspec.Meta(ge=4, le=65536)] = 64  # processes of the sandbox's user (RLIMIT_NPROC)


#: ``isolation`` in hooks.json: ``true`` (the defaults), ``false`` (off, over the file's default), or the settings.
IsolationField = Isolation | bool | None


class ShellAction(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a shell hook runs: PRX's action fields. ``null`` means the default, as in PRX's files."""

    command: str
    args: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    timeout_ms: TimeoutMs | None = None  # null: the file's timeout_ms, else HOOK_TIMEOUT_MS
    stdin_json: bool | None = None
    isolation: IsolationField = None  # null: the file's isolation, else none


class ShellHook(ShellAction, kw_only=True):
    """One entry of hooks.json: the action plus the fields hookbus's HTTP API manages."""

    id: Name | None = None
    enabled: bool | None = None
    created_at: str | None = None
    updated_at: str | None = None


class ShellHooksFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """hooks.json's top level. Keys and entries are checked one by one (to name them) by the loader."""

    hooks: dict[str, object] = {}
    enabled: bool | None = None  # PRX's switch for the whole file; null: on
    timeout_ms: TimeoutMs | None = None  # the default of actions without their own; null: HOOK_TIMEOUT_MS
    isolation: IsolationField = None  # the default of actions without their own; null: none


class ShellHookBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A hook written through hookbus's HTTP API: ``{event, action, enabled}``.

    The other fields of a listed hook may be sent back and are ignored: the id
    comes from the path, the timestamps and the flat ``command``/``timeout_ms``
    from the stored hook and its action.
    """

    event: str
    action: object  # a ShellAction, checked apart to be named ``action``
    enabled: bool | None = None
    id: object = None
    created_at: object = None
    updated_at: object = None
    command: object = None
    timeout_ms: object = None


class PrxHookBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A hook created through PRX's HTTP API shape: flat, as PRX's web console sends it."""

    event: str
    command: str
    args: list[str] = []
    timeout_ms: TimeoutMs | None = None


class PrxHookChange(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A change through PRX's HTTP API shape: the fields given (not null) replace the hook's."""

    event: str | None = None
    command: str | None = None
    args: list[str] | None = None
    timeout_ms: TimeoutMs | None = None


class HistoryFile(msgspec.Struct, forbid_unknown_fields=True):
    """<workspace>/history.yaml: what ``hookbus up`` records when ``--record`` is not given, and its limits."""

    record: list[NonEmpty]
    max_age: NonEmpty | None = None  # a duration like 7d, 12h (None: the default)
    max_bytes: NonEmpty | None = None  # a size like 1GiB, 500MB (None: the default)


#: The most memory a WASM plugin may have (PRX's default; a manifest may only lower it).
PLUGIN_MAX_MEMORY_MB = 64


class PluginMeta(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """plugin.toml's ``[plugin]`` table. ``wasm``: the module's file in the plugin's folder (default plugin.wasm).

    ``api_version``, ``author``, ``license`` and ``capability`` are PRX's (its
    Python PDK's manifests name the capability here: ``capability = "hook"``).
    """

    name: Name
    version: str = "0.0.0"
    description: str = ""
    wasm: NonEmpty | None = None
    api_version: str = "1"
    author: str | None = None
    license: str | None = None
    capability: NonEmpty | None = None


class PluginEventPattern(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """PRX's ``[[capabilities.events]]``: a pattern and what it is for."""

    pattern: NonEmpty
    description: str = ""


class PluginCapability(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One ``[[capabilities]]`` block: ``hook`` (``events``, or PRX's ``trigger``) or ``filesystem`` (a preopen).

    ``name``, ``description``, ``priority`` and ``schedule`` are PRX's (for its
    tools, middleware and cron capabilities).
    """

    type: NonEmpty
    events: list[NonEmpty | PluginEventPattern] | None = None
    trigger: NonEmpty | None = None  # PRX's Go PDK: one pattern
    path: NonEmpty | None = None  # host directory, relative to the plugin's folder or absolute
    guest: NonEmpty | None = None  # where the plugin sees it (default: /<last part of path>)
    writable: bool = False
    name: str | None = None
    description: str = ""
    priority: int | None = None
    schedule: str | None = None


class PluginPermissions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """PRX's ``[permissions]``: the host interfaces a plugin needs (``required``) or may use (``optional``)."""

    required: list[NonEmpty] = []
    optional: list[NonEmpty] = []
    http_allowlist: list[str] = []
    filesystem_allowlist: list[str] = []


class PluginResources(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """plugin.toml's ``[resources]``: memory (MiB, at most 64) and time per event (ms), by hookbus's or PRX's names.

    PRX's ``max_memory_mb`` and ``max_execution_time_ms`` are the same limits
    as ``memory_mb`` and ``timeout_ms``; ``max_fuel`` is wasmtime fuel per
    event; ``max_kv_storage_mb`` caps the plugin's KV bucket.
    """

    memory_mb: Annotated[int, msgspec.Meta(ge=1, le=PLUGIN_MAX_MEMORY_MB)] | None = None
    timeout_ms: TimeoutMs | None = None
    max_memory_mb: Annotated[int, msgspec.Meta(ge=1, le=PLUGIN_MAX_MEMORY_MB)] | None = None
    max_execution_time_ms: TimeoutMs | None = None
    max_fuel: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_kv_storage_mb: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 10
    max_http_requests_per_call: int | None = None
    pool_size: int | None = None


class PluginManifestFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """<workspace>/plugins/<name>/plugin.toml: PRX's manifest as PRX's source reads it, plus hookbus's names."""

    plugin: PluginMeta
    capabilities: list[PluginCapability] = []
    permissions: PluginPermissions = PluginPermissions()
    resources: PluginResources = PluginResources()
    config: dict[str, str] = {}
    http_allowlist: dict[str, Any] | list[str] | None = None  # PRX's Python PDK writes a top-level table


#: Every config type declared here.
CONFIGS: tuple[type[msgspec.Struct], ...] = (
    PluginManifestFile,
    PluginMeta,
    PluginCapability,
    PluginEventPattern,
    PluginPermissions,
    PluginResources,
    Isolation,
    HistoryFile,
    HookTurnsFile,
    HookTurn,
    Trigger,
    ShellHooksFile,
    ShellHook,
    ShellAction,
    ShellHookBody,
    PrxHookBody,
    PrxHookChange,
)


class ModelPrice(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """budgets.yaml ``prices.<model>``: USD per million input (prompt) and output (completion) tokens."""

    input: Annotated[float, msgspec.Meta(ge=0)]
    output: Annotated[float, msgspec.Meta(ge=0)]


class BudgetLayer(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """budgets.yaml ``session``/``group``/``user``: what one key of the layer may spend per UTC day."""

    max: Annotated[float, msgspec.Meta(gt=0)]
    unit: Literal["usd", "tokens"] = "usd"
    warn_at: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.8


class BudgetsFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """budgets.yaml (workspace): the price table and the layers (each optional); docs/stages.md#budgets."""

    prices: dict[NonEmpty, ModelPrice] = {}
    session: BudgetLayer | None = None
    group: BudgetLayer | None = None
    user: BudgetLayer | None = None


#: Seconds a Claude Code command hook may run (its default, and the most a claude-hooks.json may give one).
CLAUDE_HOOK_TIMEOUT = 60.0
CLAUDE_HOOK_MAX_TIMEOUT = 600.0


class ClaudeHookCommand(msgspec.Struct, kw_only=True, frozen=True):
    """One hook of a claude-hooks.json matcher group (hookbus runs ``command`` hooks; other fields are ignored).

    ``onFailure``: ``block`` (a hook that cannot run or fails refuses the call) or ``continue``; unset, the
    file's ``hookbus.onFailure`` or the event's default decides.
    """

    type: NonEmpty
    command: NonEmpty | None = None
    timeout: Annotated[float, msgspec.Meta(gt=0, le=CLAUDE_HOOK_MAX_TIMEOUT)] = CLAUDE_HOOK_TIMEOUT
    on_failure: Literal["block", "continue"] | None = msgspec.field(default=None, name="onFailure")


class ClaudeMatcherGroup(msgspec.Struct, kw_only=True, frozen=True):
    """A matcher group: the tool names it applies to (exact names, a regular expression, ``*`` or empty: all)."""

    matcher: str | None = ""
    hooks: list[ClaudeHookCommand]


class ClaudeHooksOptions(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """hookbus's own part of claude-hooks.json (``"hookbus": {...}``; Claude Code ignores it)."""

    #: The HOME the hooks get (and ``~`` stands for); unset: the worker's home.
    home: NonEmpty | None = None
    #: The fail mode of every hook of the file that does not say its own.
    on_failure: Literal["block", "continue"] | None = msgspec.field(default=None, name="onFailure")


class ClaudeHooksFile(msgspec.Struct, kw_only=True, frozen=True):
    """claude-hooks.json (workspace), in Claude Code's settings format: ``{"hooks": {event: [group, ...]}}``.

    A whole ``.claude/settings.json`` or a plugin's ``hooks/hooks.json`` is one too: only ``hooks`` (and
    ``hookbus``) are read, the rest is ignored.
    """

    hooks: dict[NonEmpty, list[ClaudeMatcherGroup]] = {}
    hookbus: ClaudeHooksOptions = ClaudeHooksOptions()
