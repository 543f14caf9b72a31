"""Errors of a handler's run, as :mod:`bus._runtime.eager` reports them to the module or record runner calling it.

The tree (under :class:`bus._core.errors.HookbusError`)::

    HookbusError
    ├── HandlerExit        the handler raised a BaseException that is not an Exception
    ├── HandlerCancelled   the handler cancelled its own task
    └── HandlerTimedOut    the handler gave no answer within its bound
"""

from __future__ import annotations

from bus._core.errors import HookbusError


class HandlerExit(HookbusError):
    """A handler raised a BaseException that is not an Exception (KeyboardInterrupt, SystemExit, a
    library's own unwinding class): kept as this handler's failure instead of stopping its caller."""

    def __init__(self, raised: BaseException) -> None:
        text = str(raised)
        name = type(raised).__name__
        super().__init__(f"raised {name}: {text}" if text else f"raised {name}")
        self.raised = raised


class HandlerCancelled(HookbusError):
    """A handler ended by cancelling itself (``raise CancelledError``, ``current_task().cancel()``, an
    ``asyncio.timeout`` of its own left to end the task): its failure, never a cancel of its caller."""

    def __init__(self) -> None:
        super().__init__("the handler cancelled its own task")


class HandlerTimedOut(HookbusError):
    """A handler gave no answer within its bound (``bus._runtime.eager.run_bounded``); a TimeoutError the
    handler raises itself (an ``asyncio.timeout`` of its own left uncaught) is its failure, not this."""
