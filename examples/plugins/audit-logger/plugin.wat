;; audit-logger: appends "<event>\t<payload-json>\n" to events.log in the directory granted as /audit.
;; A core module following hookbus's plugin ABI (docs/plugins.md): memory, alloc, on-event -> i64.
(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (memory (export "memory") 1)
  ;; 0..63 scratch, 64.. constants, 256.. one iovec, 4096.. the heap alloc hands out (reset after each event)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 64) "events.log")
  (data (i32.const 96) "cannot open events.log (no directory granted?)")
  (data (i32.const 160) "cannot write events.log")

  ;; Hand out n bytes from a bump heap (reset after each event), growing memory as needed.
  (func $alloc (export "alloc") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $n)))
    (block $fits
      (loop $grow
        (br_if $fits (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))
        (br $grow)))
    (local.get $p))

;; Write all of [ptr, ptr+len) to fd (a short write goes on from where it stopped); 0 or the WASI errno.
  (func $write (param $fd i32) (param $ptr i32) (param $len i32) (result i32)
    (local $errno i32) (local $done i32)
    (block $out
      (loop $more
        (br_if $out (i32.eqz (local.get $len)))
        (i32.store (i32.const 256) (local.get $ptr))
        (i32.store (i32.const 260) (local.get $len))
        (local.set $errno (call $fd_write (local.get $fd) (i32.const 256) (i32.const 1) (i32.const 8)))
        (br_if $out (local.get $errno))
        (local.set $done (i32.load (i32.const 8)))
        (local.set $ptr (i32.add (local.get $ptr) (local.get $done)))
        (local.set $len (i32.sub (local.get $len) (local.get $done)))
        (br $more)))
    (local.get $errno))

  ;; Err(message) as the ABI's i64: the address in the low 32 bits, the length in the high 32.
  (func $err (param $ptr i32) (param $len i32) (result i64)
    (i64.or (i64.extend_i32_u (local.get $ptr))
            (i64.shl (i64.extend_i32_u (local.get $len)) (i64.const 32))))

  ;; One line "<event>\t<payload-json>\n" built in one buffer and written with one append: plugins on
  ;; several workers logging to one file never interleave their lines.
  (func $record (param $ep i32) (param $el i32) (param $pp i32) (param $pl i32) (result i64)
    (local $fd i32) (local $errno i32) (local $line i32) (local $n i32)
    (local.set $n (i32.add (i32.add (local.get $el) (local.get $pl)) (i32.const 2)))
    (local.set $line (call $alloc (local.get $n)))
    (memory.copy (local.get $line) (local.get $ep) (local.get $el))
    (i32.store8 (i32.add (local.get $line) (local.get $el)) (i32.const 9))
    (memory.copy (i32.add (i32.add (local.get $line) (local.get $el)) (i32.const 1)) (local.get $pp) (local.get $pl))
    (i32.store8 (i32.sub (i32.add (local.get $line) (local.get $n)) (i32.const 1)) (i32.const 10))
    ;; path_open(first preopen = fd 3, no symlink follow, "events.log", O_CREAT, rights, FDFLAGS_APPEND, -> [0])
    (if (call $path_open (i32.const 3) (i32.const 0) (i32.const 64) (i32.const 10) (i32.const 1)
                         (i64.const 0x1FFFFFFF) (i64.const 0x1FFFFFFF) (i32.const 1) (i32.const 0))
      (then (return (call $err (i32.const 96) (i32.const 46)))))
    (local.set $fd (i32.load (i32.const 0)))
    (local.set $errno (call $write (local.get $fd) (local.get $line) (local.get $n)))
    (drop (call $fd_close (local.get $fd)))
    (if (local.get $errno) (then (return (call $err (i32.const 160) (i32.const 23)))))
    (i64.const 0))

  (func (export "on-event") (param $ep i32) (param $el i32) (param $pp i32) (param $pl i32) (result i64)
    (local $result i64)
    (local.set $result (call $record (local.get $ep) (local.get $el) (local.get $pp) (local.get $pl)))
    (global.set $heap (i32.const 4096))  ;; the next event's alloc starts over
    (local.get $result)))
