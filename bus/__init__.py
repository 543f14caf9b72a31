"""hookbus: an event bus and middleware bus for AI-agent lifecycle hooks, on NATS.

The public names are loaded when first used (PEP 562): ``from bus import Bus``
works as ever, and what imports only part of hookbus (``hookbus emit``, which
must start fast) does not load the rest. The imports under ``TYPE_CHECKING``
below are the one list of them: type checkers read them as they are, and at
run time :func:`_exports` reads the same lines (with :mod:`re`, already loaded:
:mod:`ast` would cost the fast start more than the rest of this file) to know
where each name lives. A public name is added there and nowhere else.
"""

import importlib as _importlib
import re as _re
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.client import Bus as Bus
    from bus.client import EventHandler as EventHandler
    from bus.client import Handler as Handler
    from bus.client import Subscription as Subscription
    from bus.core.catalog import EventSpec as EventSpec
    from bus.core.decisions import Ask as Ask
    from bus.core.decisions import Cancel as Cancel
    from bus.core.decisions import Continue as Continue
    from bus.core.decisions import Decision as Decision
    from bus.core.decisions import Patch as Patch
    from bus.core.envelope import Event as Event
    from bus.core.envelope import EventDict as EventDict
    from bus.core.errors import AskRefused as AskRefused
    from bus.core.errors import BusClosedError as BusClosedError
    from bus.core.errors import CatalogError as CatalogError
    from bus.core.errors import ConfigError as ConfigError
    from bus.core.errors import ConnectError as ConnectError
    from bus.core.errors import DecisionError as DecisionError
    from bus.core.errors import DeclarationError as DeclarationError
    from bus.core.errors import EnvelopeError as EnvelopeError
    from bus.core.errors import HookbusError as HookbusError
    from bus.core.errors import MiddlewareError as MiddlewareError
    from bus.core.errors import NoResponders as NoResponders
    from bus.core.errors import NotSent as NotSent
    from bus.core.errors import NotSerializableError as NotSerializableError
    from bus.core.errors import PayloadError as PayloadError
    from bus.core.errors import PayloadRefError as PayloadRefError
    from bus.core.errors import PayloadTooLarge as PayloadTooLarge
    from bus.core.errors import PublishDenied as PublishDenied
    from bus.core.errors import RegistryError as RegistryError
    from bus.core.errors import RequestTimeout as RequestTimeout
    from bus.core.errors import ServerError as ServerError
    from bus.core.errors import StageError as StageError
    from bus.core.errors import SubjectError as SubjectError
    from bus.core.errors import SyncCallError as SyncCallError
    from bus.core.errors import TransportError as TransportError
    from bus.core.payloads import AgentSpawn as AgentSpawn
    from bus.core.payloads import AgentTerminate as AgentTerminate
    from bus.core.payloads import AssistantMessage as AssistantMessage
    from bus.core.payloads import ContextEvict as ContextEvict
    from bus.core.payloads import LlmRequest as LlmRequest
    from bus.core.payloads import LlmRetry as LlmRetry
    from bus.core.payloads import LlmToken as LlmToken
    from bus.core.payloads import MemorySave as MemorySave
    from bus.core.payloads import ToolCall as ToolCall
    from bus.core.payloads import ToolExec as ToolExec
    from bus.core.payloads import ToolResult as ToolResult
    from bus.core.payloads import TurnEnd as TurnEnd
    from bus.core.payloads import UserMessage as UserMessage
    from bus.core.stages import Stage as Stage
    from bus.metrics import register_collectors as register_collectors
    from bus.middleware.faults import Outcome as Outcome
    from bus.middleware.handler.module import StageCtx as StageCtx
    from bus.middleware.kernel.asking import Asked as Asked
    from bus.middleware.kernel.intercept import MiddlewareOptions as MiddlewareOptions
    from bus.middleware.trust import TrustState as TrustState
    from bus.module import Module as Module
    from bus.port import BusState as BusState
    from bus.sync import SyncBus as SyncBus
    from bus.transport.endpoints import Credentials as Credentials
    from bus.transport.server import NatsServer as NatsServer
    from bus.turns.server import TurnRequest as TurnRequest
    from bus.turns.server import TurnResult as TurnResult


def _exports() -> dict[str, str]:
    """Each public name and the module it is imported from, read from the ``TYPE_CHECKING`` block above."""
    with open(__file__, encoding="utf-8") as source:
        block = source.read().partition("\nif TYPE_CHECKING:\n")[2].partition("\n\n")[0]
    return {
        name: module
        for module, names in _re.findall(r"from ([\w.]+) import (\([^)]*\)|[^\n]*)", block)
        for name in _re.findall(r"(\w+) as \1\b", names)
    }


_WHERE = _exports()
__all__ = sorted(_WHERE)


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
