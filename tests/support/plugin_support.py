"""WASM plugins for the tests, written in WAT (wasmtime compiles them when they load)."""

from __future__ import annotations

from pathlib import Path

#: The example plugin (a core module): appends "<event>\t<payload-json>\n" to events.log in its first grant.
RECORDER = Path(__file__).resolve().parents[2] / "examples" / "plugins" / "audit-logger" / "plugin.wat"

#: A core module whose on-event never returns.
LOOP = """(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "on-event") (param i32 i32 i32 i32) (result i64) (loop $spin (br $spin)) (i64.const 0)))"""

#: A core module that grows its memory a page at a time until refused, then traps (as an allocator would).
MEMORY_HOG = """(module
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "on-event") (param i32 i32 i32 i32) (result i64)
    (loop $more (br_if $more (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
    unreachable))"""


def err_component(message: str) -> str:
    """A component with PRX's WIT export ``on-event: func(event, payload-json) -> result<_, string>``.

    It returns Err(message) for ``tool_call`` and Ok for every other event.
    """
    data = message.encode().decode("latin-1")  # one WAT string byte per UTF-8 byte
    return f"""(component
  (core module $m
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32) (local.set $p (global.get $heap))
      (global.set $heap (i32.add (global.get $heap) (local.get 3))) (local.get $p))
    (data (i32.const 100) "{data}")
    (data (i32.const 60) "tool_call")
    (func (export "on-event") (param $ep i32) (param $el i32) (param i32 i32) (result i32)
      (global.set $heap (i32.const 1024))
      (i32.store (i32.const 0) (i32.const 0))
      (if (i32.and (i32.eq (local.get $el) (i32.const 9))
                   (i64.eq (i64.load (local.get $ep)) (i64.load (i32.const 60))))
        (then (i32.store (i32.const 0) (i32.const 1))
              (i32.store (i32.const 4) (i32.const 100))
              (i32.store (i32.const 8) (i32.const {len(message.encode())}))))
      (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "on-event") (param "event" string) (param "payload-json" string) (result (result (error string)))
    (canon lift (core func $i "on-event") (memory (core memory $i "memory")) (realloc (core func $i "realloc")))))
"""


def write_plugin(workspace: Path, name: str, wat: str, manifest_tail: str = "", events: str = '["tool_call"]') -> Path:
    """<workspace>/plugins/<name> with plugin.wat and a plugin.toml subscribing to ``events``; its folder."""
    folder = workspace / "plugins" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.wat").write_text(wat)
    manifest = f"""[plugin]
name = "{name}"
version = "1.0.0"
wasm = "plugin.wat"

[[capabilities]]
type = "hook"
events = {events}
{manifest_tail}"""
    (folder / "plugin.toml").write_text(manifest)
    return folder


def sleeper(seconds: float) -> str:
    """A core module whose on-event sleeps in WASI's ``poll_oneoff`` (one relative clock), then returns Ok."""
    return f"""(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "on-event") (param i32 i32 i32 i32) (result i64)
    (i64.store (i32.const 0) (i64.const 7))          ;; userdata
    (i32.store8 (i32.const 8) (i32.const 0))         ;; tag: clock
    (i32.store (i32.const 16) (i32.const 1))         ;; monotonic
    (i64.store (i32.const 24) (i64.const {int(seconds * 1e9)}))
    (i64.store (i32.const 32) (i64.const 0))
    (i32.store16 (i32.const 40) (i32.const 0))       ;; relative
    (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
    (i64.const 0)))"""


#: A core module whose on-event blocks in WASI's ``fd_read`` on the FIFO ``fifo`` of its first grant.
FIFO_READER = """(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "fifo")
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "on-event") (param i32 i32 i32 i32) (result i64)
    (drop (call $path_open (i32.const 3) (i32.const 0) (i32.const 64) (i32.const 4) (i32.const 0)
      (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 0)))
    (i32.store (i32.const 16) (i32.const 256))       ;; one iovec: 16 bytes at 256
    (i32.store (i32.const 20) (i32.const 16))
    (drop (call $fd_read (i32.load (i32.const 0)) (i32.const 16) (i32.const 1) (i32.const 32)))
    (i64.const 0)))"""

#: A core module that grows a table by 40 million elements: Err("grown") if it may, Ok when refused.
TABLE_HOG = """(module
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (data (i32.const 100) "grown")
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "on-event") (param i32 i32 i32 i32) (result i64)
    (if (result i64) (i32.eq (table.grow $t (ref.null func) (i32.const 40000000)) (i32.const -1))
      (then (i64.const 0))
      (else (i64.or (i64.shl (i64.const 5) (i64.const 32)) (i64.const 100))))))"""

#: A core module with five memories that grows each to 60 MiB: Ok if all grew.
MEMORIES_HOG = """(module
  (memory (export "memory") 1)
  (memory $b 1) (memory $c 1) (memory $d 1) (memory $e 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "on-event") (param i32 i32 i32 i32) (result i64)
    (drop (memory.grow 0 (i32.const 959))) (drop (memory.grow $b (i32.const 959)))
    (drop (memory.grow $c (i32.const 959))) (drop (memory.grow $d (i32.const 959)))
    (drop (memory.grow $e (i32.const 959)))
    (i64.const 0)))"""

#: A component whose on-event never returns.
LOOP_COMPONENT = """(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
    (func (export "on-event") (param i32 i32 i32 i32) (result i32) (loop $spin (br $spin)) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func (export "on-event") (param "event" string) (param "payload-json" string) (result (result (error string)))
    (canon lift (core func $i "on-event") (memory (core memory $i "memory")) (realloc (core func $i "realloc")))))"""
