"""hookbus: an event bus and middleware bus for AI-agent lifecycle hooks, on NATS."""

from bus.client import Bus, BusState, EventHandler, Handler, Subscription
from bus.core.catalog import EventSpec
from bus.core.decisions import Cancel, Continue, Decision, Patch
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
from bus.core.payloads import LlmRequest, MemorySave, ToolCall, ToolResult
from bus.core.stages import Stage
from bus.metrics import register_collectors
from bus.middleware.faults import Outcome
from bus.middleware.handler.module import Module, StageCtx
from bus.middleware.kernel.intercept import MiddlewareOptions
from bus.middleware.trust import TrustState
from bus.transport.connection import Credentials
from bus.transport.server import NatsServer
from bus.turns.server import TurnRequest, TurnResult

__all__ = [
    "Bus",
    "BusClosedError",
    "BusState",
    "Cancel",
    "CatalogError",
    "ConfigError",
    "ConnectError",
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
    "ToolCall",
    "ToolResult",
    "TrustState",
    "TurnRequest",
    "TurnResult",
    "register_collectors",
]
