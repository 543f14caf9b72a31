"""hookbus: an event bus and middleware bus for AI-agent lifecycle hooks, on NATS.

The public names are loaded when first used (PEP 562): ``from bus import Bus``
works as ever, and what imports only part of hookbus (``hookbus emit``, which
must start fast) does not load the rest.
"""

from __future__ import annotations

import importlib as _importlib
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.client import Bus, BusState, EventHandler, Handler, Subscription
    from bus.core.catalog import EventSpec
    from bus.core.decisions import Ask, Cancel, Continue, Decision, Patch
    from bus.core.envelope import Event, EventDict
    from bus.core.errors import (
        BusClosedError,
        CatalogError,
        ConfigError,
        ConnectError,
        DecisionError,
        DeclarationError,
        EnvelopeError,
        HookbusError,
        MiddlewareError,
        NotSerializableError,
        PayloadError,
        PayloadTooLarge,
        RegistryError,
        ServerError,
        StageError,
        SubjectError,
    )
    from bus.core.payloads import (
        AgentSpawn,
        AgentTerminate,
        AssistantMessage,
        ContextEvict,
        LlmRequest,
        LlmRetry,
        LlmToken,
        MemorySave,
        ToolCall,
        ToolExec,
        ToolResult,
        TurnEnd,
        UserMessage,
    )
    from bus.core.stages import Stage
    from bus.metrics import register_collectors
    from bus.middleware.faults import Outcome
    from bus.middleware.handler.module import Module, StageCtx
    from bus.middleware.kernel.asking import Asked
    from bus.middleware.kernel.intercept import MiddlewareOptions
    from bus.middleware.trust import TrustState
    from bus.sync import SyncBus
    from bus.transport.endpoints import Credentials
    from bus.transport.server import NatsServer
    from bus.turns.server import TurnRequest, TurnResult

#: Each public name and the module that defines it.
_WHERE: dict[str, str] = {
    "AgentSpawn": "bus.core.payloads",
    "AgentTerminate": "bus.core.payloads",
    "Ask": "bus.core.decisions",
    "Asked": "bus.middleware.kernel.asking",
    "AssistantMessage": "bus.core.payloads",
    "Bus": "bus.client",
    "BusClosedError": "bus.core.errors",
    "BusState": "bus.client",
    "Cancel": "bus.core.decisions",
    "CatalogError": "bus.core.errors",
    "ConfigError": "bus.core.errors",
    "ConnectError": "bus.core.errors",
    "ContextEvict": "bus.core.payloads",
    "Continue": "bus.core.decisions",
    "Credentials": "bus.transport.endpoints",
    "Decision": "bus.core.decisions",
    "DecisionError": "bus.core.errors",
    "DeclarationError": "bus.core.errors",
    "EnvelopeError": "bus.core.errors",
    "Event": "bus.core.envelope",
    "EventDict": "bus.core.envelope",
    "EventHandler": "bus.client",
    "EventSpec": "bus.core.catalog",
    "Handler": "bus.client",
    "HookbusError": "bus.core.errors",
    "LlmRequest": "bus.core.payloads",
    "LlmRetry": "bus.core.payloads",
    "LlmToken": "bus.core.payloads",
    "MemorySave": "bus.core.payloads",
    "MiddlewareError": "bus.core.errors",
    "MiddlewareOptions": "bus.middleware.kernel.intercept",
    "Module": "bus.middleware.handler.module",
    "NatsServer": "bus.transport.server",
    "NotSerializableError": "bus.core.errors",
    "Outcome": "bus.middleware.faults",
    "Patch": "bus.core.decisions",
    "PayloadError": "bus.core.errors",
    "PayloadTooLarge": "bus.core.errors",
    "RegistryError": "bus.core.errors",
    "ServerError": "bus.core.errors",
    "Stage": "bus.core.stages",
    "StageCtx": "bus.middleware.handler.module",
    "StageError": "bus.core.errors",
    "SubjectError": "bus.core.errors",
    "Subscription": "bus.client",
    "SyncBus": "bus.sync",
    "ToolCall": "bus.core.payloads",
    "ToolExec": "bus.core.payloads",
    "ToolResult": "bus.core.payloads",
    "TrustState": "bus.middleware.trust",
    "TurnEnd": "bus.core.payloads",
    "TurnRequest": "bus.turns.server",
    "TurnResult": "bus.turns.server",
    "UserMessage": "bus.core.payloads",
    "register_collectors": "bus.metrics",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'bus' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the submodules loaded so far."""
    loaded = (name for name, value in globals().items() if isinstance(value, _ModuleType) and name[0] != "_")
    return sorted({*__all__, *loaded})


__all__ = [
    "AgentSpawn",
    "AgentTerminate",
    "Ask",
    "Asked",
    "AssistantMessage",
    "Bus",
    "BusClosedError",
    "BusState",
    "Cancel",
    "CatalogError",
    "ConfigError",
    "ConnectError",
    "ContextEvict",
    "Continue",
    "Credentials",
    "Decision",
    "DecisionError",
    "DeclarationError",
    "EnvelopeError",
    "Event",
    "EventDict",
    "EventHandler",
    "EventSpec",
    "Handler",
    "HookbusError",
    "LlmRequest",
    "LlmRetry",
    "LlmToken",
    "MemorySave",
    "MiddlewareError",
    "MiddlewareOptions",
    "Module",
    "NatsServer",
    "NotSerializableError",
    "Outcome",
    "Patch",
    "PayloadError",
    "PayloadTooLarge",
    "RegistryError",
    "ServerError",
    "Stage",
    "StageCtx",
    "StageError",
    "SubjectError",
    "Subscription",
    "SyncBus",
    "ToolCall",
    "ToolExec",
    "ToolResult",
    "TrustState",
    "TurnEnd",
    "TurnRequest",
    "TurnResult",
    "UserMessage",
    "register_collectors",
]
