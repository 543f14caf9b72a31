"""Run a WASM plugin's ``on-event`` with wasmtime, fenced: memory, time, and only the directories granted.

Two kinds of module are accepted (docs/plugins.md):

- a **component** exporting PRX's WIT function
  ``on-event: func(event: string, payload-json: string) -> result<_, string>``,
  at the top level or in an exported ``hooks`` interface; WASI preview 2 is
  linked;
- a **core module** following hookbus's ABI: it exports ``memory``,
  ``alloc(len: i32) -> i32`` (once per event, for both strings, written one
  after the other) and ``on-event(event_ptr, event_len,
  payload_ptr, payload_len: i32) -> i64`` (0: Ok; otherwise Err, the UTF-8
  message at the low 32 bits' address, its length in the high 32 bits); WASI
  preview 1 is linked.

A plugin's instance serves its events one after another (as a long-lived
plugin would) until it traps; the next event gets a fresh store and instance.
The store has limits (``Store.set_limits``: the size of each memory, the number
of memories, tables and instances, the elements of a table: one memory of at
most the manifest's limit, nothing else that grows much) and each call a time
limit: epoch interruption stops wasm code (the caller bumps the engine's epoch
at the deadline, see :meth:`PluginCode.interrupt`), and a core module's
``poll_oneoff``, the one WASI preview 1 call that waits, is the host's own:
it waits at most until the deadline and wakes when the call is interrupted or
the worker stops. Calls of one plugin never overlap (a lock): the epoch is the
plugin's own engine's; a call made while an earlier one is still in a host
call past its limit is refused, not queued.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import wasmtime
import wasmtime.component as wc

from subscribers.plugins._errors import PluginError, PluginTrap
from subscribers.plugins._host_imports import LocalServices, PluginServices, link
from subscribers.plugins._manifest import Manifest
from subscribers.plugins._plugin_log import CallLog

#: The export PRX's WIT interface declares, and the interface names it may sit in: PRX's hook world exports
#: ``prx:plugin/hook-exports@0.1.0``; ``hooks`` is the name earlier hookbus documentation gave it.
EXPORT: Final = "on-event"
INTERFACES: Final = ("hook-exports", "hooks")
#: An Err message longer than this is cut (it goes to the log and the journal).
MAX_ERROR_BYTES: Final = 4096
_PAGE: Final = 65536
_MIB: Final = 1024 * 1024
#: Store limits besides the memory size (each memory's): a core module is one instance with one memory;
#: a component (componentize-py's has one memory among a few dozen core instances) shares one memory too.
#: A table's elements are a pointer each: 16 tables of 100,000 elements are under 13 MiB.
MAX_MEMORIES: Final = 1
MAX_TABLES: Final = 16
MAX_TABLE_ELEMENTS: Final = 100_000
MAX_INSTANCES_CORE: Final = 1
MAX_INSTANCES_COMPONENT: Final = 100
#: WASI preview 1 errno values and layouts poll_oneoff uses.
_ERRNO_FAULT: Final = 21
_ERRNO_INVAL: Final = 28
_SUBSCRIPTION: Final = 48
_EVENT: Final = struct.Struct("<QHB5xQH6x")


@dataclass(frozen=True)
class _Entry:
    """Where ``on-event`` is in a component (None for a core module)."""

    index: wc.ExportIndex | None


class PluginCode:
    """A plugin's compiled module, its engine and its limits; ``call`` runs one event."""

    def __init__(self, manifest: Manifest, wasm: bytes) -> None:
        self.manifest = manifest
        config = wasmtime.Config()
        config.epoch_interruption = True
        config.wasm_component_model = True
        config.consume_fuel = manifest.fuel is not None
        with contextlib.suppress(wasmtime.WasmtimeError):  # compiled code kept on disk: a big component loads once
            config.cache = True
        self.engine = wasmtime.Engine(config)
        self.component = _is_component(wasm)
        self._lock = threading.Lock()
        self._live: _Live | None = None
        self._closed = False
        #: Set when the running call is interrupted or the worker stops: a host-side wait ends at once.
        self._wake = threading.Event()
        self._deadline = 0.0
        self._cut_short = False
        #: kv and events for PRX's host interfaces (the worker's: the bus), and the handled event's depth.
        self.services: PluginServices = LocalServices()
        self.depth = 0
        self.calls = 0
        #: The log lines of the last call (the worker journals them after it).
        self.logged = CallLog()
        try:
            if self.component:
                self._component = wc.Component(self.engine, wasm)
                self._entry = _Entry(_find_export(self._component, self.engine, manifest.name))
                self._clinker = wc.Linker(self.engine)
                self._clinker.add_wasip2()
                link(self._clinker, manifest, self)
            else:
                self._module = wasmtime.Module(self.engine, wasm)
                _check_core_exports(self._module, manifest.name)
                linker = wasmtime.Linker(self.engine)
                linker.define_wasi()
                linker.allow_shadowing = True
                i32 = wasmtime.ValType.i32()
                poll = wasmtime.FuncType([i32] * 4, [i32])
                linker.define_func("wasi_snapshot_preview1", "poll_oneoff", poll, self._poll_oneoff, access_caller=True)
                self._pre = linker.instantiate_pre(self._module)
        except wasmtime.WasmtimeError as exc:
            reason = f"{manifest.wasm.name} is not a usable module: {_first_line(exc)}"
            raise PluginError(manifest.name, reason) from None

    @property
    def kind(self) -> str:
        return "component" if self.component else "core module"

    def interrupt(self) -> None:
        """Stop the running call at its next loop or call (the time limit); safe from any thread."""
        self._wake.set()
        self.engine.increment_epoch()

    def shut_down(self) -> None:
        """Stop the running call (the worker is stopping) and every later one before it starts."""
        self._closed = True
        self._wake.set()
        self.engine.increment_epoch()

    def time_left(self) -> float:
        """Seconds until the running call's deadline (host functions wait at most this long)."""
        return max(0.0, self._deadline - time.monotonic())

    def call(self, event: str, payload_json: str, deadline: float | None = None, depth: int = 0) -> str | None:
        """Run ``on-event``; None for Ok, the message for Err. Raises PluginTrap when it does not return.

        ``deadline`` (``time.monotonic()``; default: the time limit from now)
        is when the caller calls :meth:`interrupt`; host-side waits end then.
        """
        if not self._lock.acquire(blocking=False):
            raise PluginTrap("not run: its last call is still inside a host call, past its time limit")
        try:
            self.depth = depth
            self.calls += 1
            self.logged = CallLog()
            return self._call(event, payload_json, deadline)
        finally:
            self._lock.release()

    def _call(self, event: str, payload_json: str, deadline: float | None) -> str | None:
        if self._closed:
            raise PluginTrap("not run: the worker is stopping")
        self._wake.clear()
        self._cut_short = False
        self._deadline = deadline if deadline is not None else time.monotonic() + self.manifest.timeout_ms / 1000
        live = self._live or self._start()
        live.store.set_epoch_deadline(1)
        if self.manifest.fuel is not None:
            live.store.set_fuel(self.manifest.fuel)
        if time.monotonic() >= self._deadline:  # the caller's interrupt may have come before the line above
            self.interrupt()
        try:
            if self.component:
                result = self._call_component(live, event, payload_json)
            else:
                result = self._call_core(live, event, payload_json)
        except wasmtime.Trap as exc:
            self._live = None  # a trapped instance is never entered again
            raise self._trap(exc, live) from None
        except wasmtime.WasmtimeError as exc:
            self._live = None
            if "wasm trap: interrupt" in str(exc):  # a component's epoch trap comes back as an error
                raise self._interrupted() from None
            raise PluginTrap(_first_line(exc)) from None
        finally:
            if self._cut_short:  # its wait ended at the deadline or the stop: the call is stopped, whatever it returned
                self._live = None
        if self._cut_short:
            raise self._interrupted()
        return result

    def _start(self) -> _Live:
        """A fresh store (limits, WASI grants) and instance, kept for the next events until one traps."""
        store = wasmtime.Store(self.engine)
        store.set_limits(
            memory_size=self.manifest.memory_bytes,
            table_elements=MAX_TABLE_ELEMENTS,
            instances=MAX_INSTANCES_COMPONENT if self.component else MAX_INSTANCES_CORE,
            tables=MAX_TABLES,
            memories=MAX_MEMORIES,
        )
        store.set_epoch_deadline(1)
        if self.manifest.fuel is not None:
            store.set_fuel(self.manifest.fuel)
        store.set_wasi(self._wasi())
        try:
            if self.component:
                instance = self._clinker.instantiate(store, self._component)
                assert self._entry.index is not None
                func = instance.get_func(store, self._entry.index)
                if func is None:
                    raise PluginTrap(f"the instance has no {EXPORT}")
                live = _Live(store, None, None, func)
            else:
                exports = self._pre.instantiate(store).exports(store)
                memory, alloc, on_event = exports["memory"], exports["alloc"], exports[EXPORT]
                assert isinstance(memory, wasmtime.Memory)
                assert isinstance(alloc, wasmtime.Func)
                assert isinstance(on_event, wasmtime.Func)
                live = _Live(store, memory, _core_call(alloc, 1), _core_call(on_event, 4))
        except wasmtime.Trap as exc:
            raise self._trap(exc, None) from None
        except wasmtime.WasmtimeError as exc:  # e.g. its initial memory is over the limit
            raise PluginTrap(f"cannot be instantiated: {_first_line(exc)}") from None
        self._live = live
        return live

    def _wasi(self) -> wasmtime.WasiConfig:
        wasi = wasmtime.WasiConfig()
        for grant in self.manifest.preopens:
            wasi.preopen_dir(str(grant.host), grant.guest, grant.writable)
        return wasi

    def _poll_oneoff(self, caller: wasmtime.Caller, subs: int, events: int, count: int, written: int) -> int:
        """WASI preview 1 ``poll_oneoff``, bounded: a clock waits at most until the call's deadline.

        A file descriptor is always ready (a preopen holds files and
        directories only). Clocks that have not expired when the wait ends
        (the deadline, an interrupt, the worker stopping) report no event;
        the epoch trap follows at the plugin's next loop or call.
        """
        memory = caller.get("memory")
        if not isinstance(memory, wasmtime.Memory) or count <= 0:
            return _ERRNO_INVAL
        size = memory.data_len(caller)
        if subs < 0 or events < 0 or subs + count * _SUBSCRIPTION > size or events + count * _EVENT.size > size:
            return _ERRNO_FAULT
        if written < 0 or written + 4 > size:
            return _ERRNO_FAULT
        data = memory.read(caller, subs, subs + count * _SUBSCRIPTION)
        start_ns, wall_ns = time.monotonic_ns(), time.time_ns()
        ready: list[bytes] = []
        clocks: list[tuple[int, int]] = []  # (userdata, nanoseconds to wait)
        for index in range(count):
            at = index * _SUBSCRIPTION
            userdata, tag = struct.unpack_from("<QB", data, at)
            if tag == 0:
                clock, timeout, _precision, flags = struct.unpack_from("<I4xQQH", data, at + 16)
                if flags & 1:  # an absolute time on that clock (0: realtime, else monotonic)
                    timeout = max(0, timeout - (wall_ns if clock == 0 else start_ns))
                clocks.append((userdata, timeout))
            elif tag in (1, 2):
                ready.append(_EVENT.pack(userdata, 0, tag, 0, 0))
            else:
                return _ERRNO_INVAL
        if not ready and clocks:
            wait_s = min(timeout for _, timeout in clocks) / 1e9
            self._wake.wait(max(0.0, min(wait_s, self._deadline - time.monotonic())))
            waited = time.monotonic_ns() - start_ns
            ready = [_EVENT.pack(userdata, 0, 0, 0, 0) for userdata, timeout in clocks if timeout <= waited]
            # Cut short (the deadline or the stop): the epoch trap comes at the plugin's next loop or call, and
            # whatever the call returns now is not its result (a host exception would pass through a global).
            self._cut_short = not ready
        memory.write(caller, b"".join(ready), events)
        memory.write(caller, struct.pack("<I", len(ready)), written)
        return 0

    def _call_component(self, live: _Live, event: str, payload_json: str) -> str | None:
        result = live.on_event(live.store, event, payload_json)
        return None if result is None else _cut(str(result))

    def _call_core(self, live: _Live, event: str, payload_json: str) -> str | None:
        store, memory = live.store, live.memory
        assert memory is not None
        assert live.alloc is not None
        name, payload = event.encode(), payload_json.encode()
        ptr = live.alloc(store, len(name) + len(payload))
        if not isinstance(ptr, int) or ptr < 0 or ptr + len(name) + len(payload) > memory.data_len(store):
            raise PluginTrap(f"alloc({len(name) + len(payload)}) returned {ptr!r}, outside the plugin's memory")
        memory.write(store, name + payload, ptr)
        status = live.on_event(store, ptr, len(name), ptr + len(name), len(payload))
        if not isinstance(status, int):
            raise PluginTrap(f"{EXPORT} returned {status!r}, not an i64")
        if status == 0:
            return None
        status &= 0xFFFFFFFFFFFFFFFF  # an i64 comes back signed
        at, length = status & 0xFFFFFFFF, status >> 32
        if at + length > memory.data_len(store):
            return f"(an error message outside the plugin's memory: {at}+{length})"
        return _cut(memory.read(store, at, at + min(length, MAX_ERROR_BYTES)).decode(errors="replace"))

    def _interrupted(self) -> PluginTrap:
        if self._closed:
            return PluginTrap("stopped: the worker is stopping")
        return PluginTrap(f"stopped at its time limit of {self.manifest.timeout_ms} ms", timed_out=True)

    def _trap(self, exc: wasmtime.Trap, live: _Live | None) -> PluginTrap:
        if exc.trap_code == wasmtime.TrapCode.INTERRUPT or self._cut_short:
            return self._interrupted()
        if exc.trap_code == wasmtime.TrapCode.OUT_OF_FUEL:
            return PluginTrap(f"stopped: out of fuel (its max_fuel of {self.manifest.fuel:,} per event)")
        reason = f"trapped: {_first_line(exc)}"
        if live is not None and live.memory is not None:
            used, limit = live.memory.data_len(live.store), self.manifest.memory_bytes
            if used + _PAGE > limit:
                reason += f" (memory at its limit of {limit / _MIB:g} MiB)"
            else:
                reason += f" (memory {used / _MIB:.1f} MiB of its {limit / _MIB:g} MiB)"
        return PluginTrap(reason)


#: A core function as the host calls it: (store, i32 arguments) -> the integer result.
CoreCall = Callable[..., Any]


class _RawCall:
    """A core function of i32 parameters and one integer result, called through wasmtime's C API directly.

    wasmtime-py's ``Func.__call__`` reads the function's type and converts
    every value through Python objects on each call: about fifty times the
    cost of the call itself. This keeps the argument and result buffers and
    raises the same ``Trap``/``WasmtimeError``. It leans on wasmtime-py's
    private names (``_ffi``, ``Func._func``, ``Store._context``); where they
    are missing :func:`_core_call` falls back to the public call.
    """

    def __init__(self, func: wasmtime.Func, params: int) -> None:
        from wasmtime import _ffi as ffi  # the C API's ctypes bindings

        self._ffi = ffi
        self._func = func._func
        self._params = (ffi.wasmtime_val_t * params)()
        for value in self._params:
            value.kind = ffi.WASMTIME_I32
        self._results = (ffi.wasmtime_val_t * 1)()
        self._i64: int = ffi.WASMTIME_I64.value

    def __call__(self, store: wasmtime.Store, *args: int) -> int:
        ffi, params = self._ffi, self._params
        for index, arg in enumerate(args):
            params[index].of.i32 = arg
        trap = ctypes.POINTER(ffi.wasm_trap_t)()
        error = ffi.wasmtime_func_call(
            store._context(), ctypes.byref(self._func), params, len(args), self._results, 1, ctypes.byref(trap)
        )
        if error:
            raise wasmtime.WasmtimeError._from_ptr(error)
        if trap:
            raise wasmtime.Trap._from_ptr(trap)
        result = self._results[0]
        kind: Any = result.kind  # an int when read (the stubs say c_ubyte)
        return int(result.of.i64 if kind == self._i64 else result.of.i32)


def _core_call(func: wasmtime.Func, params: int) -> CoreCall:
    """The fast caller of ``func`` where wasmtime-py's internals are as expected, else its public call."""
    try:
        return _RawCall(func, params)
    except (ImportError, AttributeError):
        return func


@dataclass(frozen=True)
class _Live:
    """A plugin's running instance: its store, and (core modules) its memory and alloc."""

    store: wasmtime.Store
    memory: wasmtime.Memory | None
    alloc: CoreCall | None
    on_event: CoreCall | wc.Func


def load_code(manifest: Manifest) -> PluginCode:
    """Read and compile the plugin's module; PluginError names what is wrong."""
    try:
        wasm = manifest.wasm.read_bytes()
    except OSError as exc:
        raise PluginError(manifest.name, f"cannot read {manifest.wasm}: {exc.strerror or exc}") from None
    return PluginCode(manifest, wasm)


def _is_component(wasm: bytes) -> bool:
    """A binary component has layer 1 in its header; text (WAT) says ``(component``."""
    if wasm[:4] == b"\0asm":
        return wasm[6:8] == b"\x01\x00"
    return wasm.lstrip().startswith(b"(component")


def _find_export(component: wc.Component, engine: wasmtime.Engine, name: str) -> wc.ExportIndex:
    index = component.get_export_index(EXPORT)
    if index is not None:
        return index
    for export in component.type.exports(engine):
        iface = export.rsplit("/", 1)[-1].split("@", 1)[0]
        if iface in INTERFACES:
            outer = component.get_export_index(export)
            inner = component.get_export_index(EXPORT, outer) if outer is not None else None
            if inner is not None:
                return inner
    raise PluginError(name, f"the component exports no {EXPORT} (top level or in PRX's hook-exports interface)")


def _check_core_exports(module: wasmtime.Module, name: str) -> None:
    exports = {export.name: export.type for export in module.exports}
    wanted = {
        "memory": wasmtime.MemoryType,
        "alloc": wasmtime.FuncType,
        EXPORT: wasmtime.FuncType,
    }
    for export, kind in wanted.items():
        if not isinstance(exports.get(export), kind):
            raise PluginError(name, f"the module does not export {export!r} (the hookbus ABI, docs/plugins.md)")
    on_event = exports[EXPORT]
    assert isinstance(on_event, wasmtime.FuncType)
    i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
    if list(on_event.params) != [i32] * 4 or list(on_event.results) != [i64]:
        raise PluginError(name, f"{EXPORT} must be (i32, i32, i32, i32) -> i64 (the hookbus ABI, docs/plugins.md)")
    alloc = exports["alloc"]
    assert isinstance(alloc, wasmtime.FuncType)
    if list(alloc.params) != [i32] or list(alloc.results) != [i32]:
        raise PluginError(name, "alloc must be (i32) -> i32 (the hookbus ABI, docs/plugins.md)")


def _cut(message: str) -> str:
    return message if len(message) <= MAX_ERROR_BYTES else message[:MAX_ERROR_BYTES] + "…"


def _first_line(exc: Exception) -> str:
    """The line of wasmtime's message that says what happened (its cause, when it gives one)."""
    text = str(exc).strip()
    head, _, cause = text.partition("Caused by:")
    for line in (cause or head).splitlines():
        line = line.strip().removeprefix("0:").strip()
        if line:
            return line
    return type(exc).__name__
