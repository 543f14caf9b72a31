"""hookbus: an event bus and middleware bus for AI-agent lifecycle hooks, on NATS."""

from bus.catalog import EventSpec
from bus.client import Bus, BusState, Handler, Subscription
from bus.decisions import Cancel, Continue, Decision, Patch
from bus.envelope import Event, EventDict
from bus.errors import (
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
from bus.faults import Outcome
from bus.intercept import MiddlewareOptions
from bus.module import Module, StageCtx
from bus.payloads import LlmRequest, MemorySave, ToolCall, ToolResult
from bus.server import NatsServer
from bus.stages import Stage
from bus.trust import TrustState
from bus.turns import TurnRequest, TurnResult

__all__ = [
    "Bus",
    "BusClosedError",
    "BusState",
    "Cancel",
    "CatalogError",
    "ConfigError",
    "ConnectError",
    "Continue",
    "Decision",
    "DecisionError",
    "DeclarationError",
    "EnvelopeError",
    "Event",
    "EventDict",
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
]
