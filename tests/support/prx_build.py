"""PRX's Python PDK example built into a component with componentize-py, as tests/fixtures/prx/README.md says.

The build is cached by the digest of everything that goes into it, so it runs
once per machine (about 6 s).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PRX = FIXTURES / "prx"
GLUE = FIXTURES / "prx_glue"
EXAMPLE = PRX / "pdk" / "python" / "examples" / "logger-hook"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hookbus-tests" / "prx"


def componentize_py() -> str | None:
    found = Path(sys.executable).parent / "componentize-py"
    return str(found) if found.exists() else shutil.which("componentize-py")


def stage_wit(into: Path) -> Path:
    """PRX's wit/ laid out as componentize-py reads it: worlds.wit and plugin/*.wit at the top, host/ in deps/.

    PRX's worlds.wit imports ``prx:host/log`` without the version its package
    declares and exports ``prx:plugin/<interface>`` from inside that package;
    the parser wants ``prx:host/log@0.1.0`` (as PRX's own
    ``pdk/rust/examples/voice-talk-realtime/wit/world.wit`` writes it) and a
    local ``<interface>``. Those two spellings are all that changes.
    """
    wit = into / "wit"
    (wit / "deps" / "prx-host").mkdir(parents=True)
    worlds = (PRX / "wit" / "worlds.wit").read_text()
    worlds = re.sub(r"import prx:host/([a-z-]+);", r"import prx:host/\1@0.1.0;", worlds)
    worlds = re.sub(r"export prx:plugin/([a-z-]+);", r"export \1;", worlds)
    (wit / "worlds.wit").write_text(worlds)
    for path in sorted((PRX / "wit" / "plugin").glob("*.wit")):
        shutil.copy(path, wit / path.name)
    for path in sorted((PRX / "wit" / "host").glob("*.wit")):
        shutil.copy(path, wit / "deps" / "prx-host" / path.name)
    return wit


def _inputs() -> list[Path]:
    return sorted(p for root in (PRX, GLUE) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


#: A hook-world component of hookbus's tests (not PRX's): on-event sleeps a minute (WASI preview 2 clocks).
SLEEPER_APP = """import time

import wit_world.exports


class HookExports(wit_world.exports.HookExports):
    def on_event(self, event: str, payload_json: str) -> None:
        time.sleep(60)
"""


#: A hook-world component of hookbus's tests: publishes 150 events, then logs a line with a newline and an escape.
FLOODER_APP = """import wit_world.exports
from wit_world.imports import events, log


class HookExports(wit_world.exports.HookExports):
    def on_event(self, event: str, payload_json: str) -> None:
        refused = 0
        for n in range(150):
            try:
                events.publish("flood", "{}")
            except Exception:
                refused += 1
        log.log(log.Level.WARN, f"refused {refused}\\n\\x1b[31mplugin other: forged")
"""


#: A hook-world component of hookbus's tests: logs 500 lines, one of them dressed as another process's entry.
LOG_FLOODER_APP = """import wit_world.exports
from wit_world.imports import log


class HookExports(wit_world.exports.HookExports):
    def on_event(self, event: str, payload_json: str) -> None:
        log.log(log.Level.ERROR, 'x\\n{"kind": "trigger", "who": "other", "process": "elsewhere"}\\x1b[2J')
        for n in range(499):
            log.log(log.Level.INFO, f"line {n}")
"""


def build_logger_hook(tool: str, app: str | None = None) -> Path:
    """plugin.wasm of PRX's logger-hook example (cached), or of ``app`` as the entry module instead of the glue's.

    Raises CalledProcessError with the tool's output.
    """
    digest = hashlib.sha256(subprocess.run([tool, "--version"], capture_output=True, check=True).stdout)
    for path in _inputs():
        digest.update(path.relative_to(FIXTURES).as_posix().encode() + b"\0" + path.read_bytes())
    digest.update((app or "").encode())
    out = CACHE / f"{'app' if app else 'logger-hook'}-{digest.hexdigest()[:16]}.wasm"
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    work = CACHE / f"build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        wit = stage_wit(work)
        shutil.copytree(PRX / "pdk" / "python" / "prx_pdk", work / "prx_pdk")
        shutil.copy(EXAMPLE / "plugin.py", work / "plugin.py")
        shutil.copy(GLUE / "app.py", work / "app.py")
        if app is not None:
            (work / "app.py").write_text(app)
        shutil.copytree(GLUE / "prx", work / "prx")
        command = [tool, "--wit-path", str(wit), "--world", "hook", "componentize", "app", "-o", "plugin.wasm"]
        subprocess.run(command, cwd=work, capture_output=True, check=True, timeout=600)
        os.replace(work / "plugin.wasm", out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out
