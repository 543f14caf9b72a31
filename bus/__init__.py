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
    from bus._client import Bus as Bus
    from bus._client import EventHandler as EventHandler
    from bus._client import Handler as Handler
    from bus._client import Subscription as Subscription
    from bus._core.catalog import EventSpec as EventSpec
    from bus._core.decisions import Ask as Ask
    from bus._core.decisions import Cancel as Cancel
    from bus._core.decisions import Continue as Continue
    from bus._core.decisions import Decision as Decision
    from bus._core.decisions import Patch as Patch
    from bus._core.envelope import Event as Event
    from bus._core.envelope import EventDict as EventDict
    from bus._core.errors import AskRefused as AskRefused
    from bus._core.errors import BusClosedError as BusClosedError
    from bus._core.errors import CatalogError as CatalogError
    from bus._core.errors import ConfigError as ConfigError
    from bus._core.errors import ConnectError as ConnectError
    from bus._core.errors import DecisionError as DecisionError
    from bus._core.errors import DeclarationError as DeclarationError
    from bus._core.errors import EnvelopeError as EnvelopeError
    from bus._core.errors import HookbusError as HookbusError
    from bus._core.errors import MiddlewareError as MiddlewareError
    from bus._core.errors import NoResponders as NoResponders
    from bus._core.errors import NotSent as NotSent
    from bus._core.errors import NotSerializableError as NotSerializableError
    from bus._core.errors import PayloadError as PayloadError
    from bus._core.errors import PayloadRefError as PayloadRefError
    from bus._core.errors import PayloadTooLarge as PayloadTooLarge
    from bus._core.errors import PublishDenied as PublishDenied
    from bus._core.errors import RegistryError as RegistryError
    from bus._core.errors import RequestTimeout as RequestTimeout
    from bus._core.errors import ServerError as ServerError
    from bus._core.errors import StageError as StageError
    from bus._core.errors import SubjectError as SubjectError
    from bus._core.errors import SyncCallError as SyncCallError
    from bus._core.errors import TransportError as TransportError
    from bus._core.payloads import AgentError as AgentError
    from bus._core.payloads import AgentSpawn as AgentSpawn
    from bus._core.payloads import AgentTerminate as AgentTerminate
    from bus._core.payloads import AssistantMessage as AssistantMessage
    from bus._core.payloads import ContextEvict as ContextEvict
    from bus._core.payloads import LlmRequest as LlmRequest
    from bus._core.payloads import LlmRetry as LlmRetry
    from bus._core.payloads import LlmToken as LlmToken
    from bus._core.payloads import LoopEnd as LoopEnd
    from bus._core.payloads import MemorySave as MemorySave
    from bus._core.payloads import ToolCall as ToolCall
    from bus._core.payloads import ToolExec as ToolExec
    from bus._core.payloads import ToolResult as ToolResult
    from bus._core.payloads import TurnAfter as TurnAfter
    from bus._core.payloads import TurnDone as TurnDone
    from bus._core.payloads import TurnEnd as TurnEnd
    from bus._core.payloads import UserMessage as UserMessage
    from bus._core.stages import Stage as Stage
    from bus._metrics import register_collectors as register_collectors
    from bus._middleware.faults import Outcome as Outcome
    from bus._middleware.handler.module import StageCtx as StageCtx
    from bus._middleware.kernel.asking import Asked as Asked
    from bus._middleware.kernel.intercept import MiddlewareOptions as MiddlewareOptions
    from bus._middleware.rules.errors import RuleFileError as RuleFileError
    from bus._middleware.trust import TrustState as TrustState
    from bus._module import Module as Module
    from bus._port import BusState as BusState
    from bus._switching import disable_handler as disable_handler
    from bus._switching import enable_handler as enable_handler
    from bus._switching import grant_handler as grant_handler
    from bus._switching import revoke_handler as revoke_handler
    from bus._switching import shadow_handler as shadow_handler
    from bus._transport.endpoints import Credentials as Credentials
    from bus._transport.server import NatsServer as NatsServer
    from bus._turns.server import TurnRequest as TurnRequest
    from bus._turns.server import TurnResult as TurnResult
    from bus.sync import SyncBus as SyncBus


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
