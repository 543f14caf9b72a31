"""hookbus: an event bus and middleware bus for AI-agent lifecycle hooks, on NATS."""

from bus.catalog import EventSpec
from bus.client import Bus, BusState, Handler, Subscription
from bus.envelope import Event, EventDict
from bus.errors import (
    BusClosedError,
    CatalogError,
    ConfigError,
    ConnectError,
    EnvelopeError,
    HookbusError,
    NotSerializableError,
    PayloadError,
    PayloadTooLarge,
    ServerError,
    SubjectError,
)
from bus.server import NatsServer

__all__ = [
    "Bus",
    "BusClosedError",
    "BusState",
    "CatalogError",
    "ConfigError",
    "ConnectError",
    "EnvelopeError",
    "Event",
    "EventDict",
    "EventSpec",
    "Handler",
    "HookbusError",
    "NatsServer",
    "NotSerializableError",
    "PayloadError",
    "PayloadTooLarge",
    "ServerError",
    "SubjectError",
    "Subscription",
]
