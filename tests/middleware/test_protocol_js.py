"""The middleware wire proven from both sides: a JavaScript module and kernel (examples/js) against hookbus.

The JavaScript code is written from docs/protocol.md with the official nats
client. A JS module serves a Python kernel (cancel, patch and continue through
a chain, fail modes, identities trusted by approval); a Python module serves
the JS kernel; and ``node --test`` checks the identity vectors.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Continue, Module, Patch
from bus._core.declaration import declare
from bus._middleware.registry import MODULES_BUCKET, Announcement, open_bucket
from bus.testing import serving, wait_for_chain
from tests.conftest import IN_CI, require_binary, unique

JS = Path(__file__).resolve().parents[2] / "examples" / "js"
VECTORS = Path(__file__).resolve().parents[1] / "vectors"
#: Bound on every wait for a JS process (a line from it, its exit).
WAIT = 20.0


def node() -> str:
    """The node binary, with examples/js's npm packages installed: skip on a laptop without them, fail in CI."""
    path = require_binary("node")
    if not (JS / "node_modules" / "nats").is_dir():
        message = "examples/js/node_modules is missing (npm ci --prefix examples/js; scripts/test does it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


class JsProcess:
    """A node process of examples/js/bin speaking JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._next = 0

    async def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), WAIT)
        if not raw:
            assert self.proc.stderr is not None
            err = await asyncio.wait_for(self.proc.stderr.read(), WAIT)
            raise AssertionError(f"the node process ended: {err.decode(errors='replace')}")
        obj: dict[str, Any] = json.loads(raw)
        return obj

    async def ask(self, op: str, **fields: Any) -> Any:
        """Send one request line to the JS kernel; its result, or AssertionError with its error."""
        assert self.proc.stdin is not None
        self._next += 1
        self.proc.stdin.write(orjson.dumps({"id": self._next, "op": op, **fields}) + b"\n")
        await self.proc.stdin.drain()
        answer = await self.line()
        assert answer.get("id") == self._next, answer
        assert "error" not in answer, answer["error"]
        return answer["result"]


@asynccontextmanager
async def js_process(script: str, *args: str) -> AsyncIterator[tuple[JsProcess, dict[str, Any]]]:
    """Run ``node bin/<script> ARGS`` until the block ends (end of stdin stops it); yield it and its ready line."""
    proc = await asyncio.create_subprocess_exec(
        node(),
        str(JS / "bin" / script),
        *args,
        cwd=JS,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    js = JsProcess(proc)
    try:
        ready = await js.line()
        assert ready.get("ready") is True, ready
        yield js, ready
    finally:
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), WAIT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, f"node bin/{script} exited with {proc.returncode}"


async def approve(operator: Bus, *names: str) -> None:
    """What ``hookbus approve NAME`` does: put each handler's current identity in the trust store."""
    view = await operator.middleware.start()
    await view.wait_until(lambda: all(name in view.declarations() for name in names), WAIT)
    for name in names:
        await view.approve(view.declarations()[name][0])


#: The JS test files that run one test per vector of tests/vectors; every other file in examples/js/test
#: is counted by its own ``test(...)`` calls, so a new JS test file changes neither count.
VECTOR_TESTS = ("test/identity.test.js", "test/messages.test.js")


def node_test(*files: str) -> str:
    """``node --test FILES`` in examples/js: its TAP output, after asserting that it exited cleanly."""
    done = subprocess.run([node(), "--test", *files], cwd=JS, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def test_node_checks_the_identity_vectors() -> None:
    """The JS side reproduces every vector: identities, versions, and which announcements, replies and
    requests are valid (tests/middleware/test_protocol_vectors.py holds the Python side to the same files)."""
    out = node_test(*VECTOR_TESTS)
    files = ("identity", "identity_invalid", "version", "announcements", "replies", "requests")
    expected = sum(len(json.loads((VECTORS / f"{name}.json").read_text())) for name in files)
    assert f"# pass {expected}\n" in out and "# fail 0\n" in out, out[-1000:]


def test_node_runs_every_other_js_test() -> None:
    """The remaining JS test files (stage rules and the like) all run and pass: each top-level ``test(``
    call of theirs is one passing test, none skipped."""
    others = sorted(f"test/{p.name}" for p in (JS / "test").glob("*.test.js") if f"test/{p.name}" not in VECTOR_TESTS)
    assert others, "examples/js/test has no test file beside the vector ones (stages.test.js is expected)"
    expected = sum(len(re.findall(r"^test\(", (JS / f).read_text(), re.MULTILINE)) for f in others)
    out = node_test(*others)
    assert expected > 0 and f"# pass {expected}\n" in out and "# fail 0\n" in out, out[-1000:]


async def test_a_js_module_serves_the_python_kernel(nats_url: str) -> None:
    name = unique("js")
    node()
    async with (
        Bus(nats_url, name="kernel") as kernel,
        js_process("module.js", "--servers", nats_url, "--name", name, "--detach-on-stop") as (_, ready),
    ):
        view = await kernel.middleware.start()
        qualnames = [f"{name}.no_rm", f"{name}.tag", f"{name}.boom"]
        await view.wait_until(lambda: all(q in view.declarations() for q in qualnames), WAIT)
        # The identities the JS module computed are the ones the Python kernel computes from its announcement.
        assert {q: view.declarations()[q][0].identity() for q in qualnames} == ready["identities"]
        rm = {"name": "shell", "input": {"command": "rm -rf /"}}
        assert await kernel.intercept("tool.call", rm) == Continue()  # not approved yet: nothing runs

        await approve(kernel, *qualnames)
        await wait_for_chain(kernel, "tool.call", [f"{name}.no_rm", f"{name}.tag"], WAIT)
        await wait_for_chain(kernel, "custom.jsfault", [f"{name}.boom"], WAIT)

        cancel = await kernel.intercept("tool.call", rm)
        assert cancel == Cancel("refused: rm -rf /", f"{name}.no_rm")
        patched = await kernel.intercept("tool.call", {"name": "shell", "input": {"command": "ls"}})
        assert patched == Patch({"name": "shell", "input": {"command": "ls", "tagged_by": "js"}})
        assert (
            await kernel.intercept("tool.call", {"name": "read_file", "input": {}}) == Continue()
        )  # match: not wanted
        fault = await kernel.intercept("custom.jsfault", {})
        assert isinstance(fault, Cancel) and fault.handler == f"{name}.boom"
        assert fault.reason == f"{name}.boom is fail-closed and failed: raised Error: boom"

        # A handler the module does not know: an absent reaction (the kernel reads it per its own fail mode).
        request = {"stage": "tool.call", "payload": {}, "ctx": {"depth": 0}, "handlers": ["nope", "tag"]}
        msg = await kernel.port.nc.request(ready["subject"], orjson.dumps(request), timeout=WAIT)
        reply = orjson.loads(msg.data)
        assert reply["decision"] == "patch"
        nope, tag = reply["reactions"]
        assert nope == {
            "handler": f"{name}.nope",
            "outcome": "absent",
            "decision": "continue",
            "duration_ms": 0,
            "cause": "not declared here",
        }
        assert tag["handler"] == f"{name}.tag" and tag["outcome"] == "ok" and tag["decision"] == "patch"
        bad_depth = {**request, "ctx": {"depth": 8}}
        msg = await kernel.port.nc.request(ready["subject"], orjson.dumps(bad_depth), timeout=WAIT)
        assert "ctx.depth 8" in orjson.loads(msg.data)["error"]


def python_module(name: str, stage: str, fault_stage: str) -> Module:
    module = Module(name)

    @module.stage(stage, match="ok|bad")
    async def first(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "seen_by": [*payload.get("seen_by", []), "first"]})

    @module.stage(stage, after="first")
    async def second(stage: str, payload: dict[str, Any]) -> Cancel | Patch:
        if payload.get("name") == "bad":
            return Cancel(f"second refuses {payload['name']}")
        return Patch({**payload, "seen_by": [*payload.get("seen_by", []), "second"]})

    @module.stage(stage)
    async def sneaky(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("never approved: must never run")

    @module.stage(fault_stage, fail_closed=True, timeout=1)
    async def boom(stage: str, payload: dict[str, Any]) -> Continue:
        raise RuntimeError("boom")

    return module


async def test_a_python_module_serves_the_js_kernel(nats_url: str) -> None:
    name = unique("py")
    stage, fault_stage = f"custom.{name}", f"custom.{name}.fault"
    node()
    async with Bus(nats_url, name="operator") as operator, AsyncExitStack() as module_stack:
        await module_stack.enter_async_context(serving(python_module(name, stage, fault_stage), nats_url))
        await approve(operator, f"{name}.first", f"{name}.second", f"{name}.boom")
        async with js_process("kernel.js", "--servers", nats_url) as (kernel, _):
            assert await kernel.ask("wait", stage=stage, handlers=[f"{name}.first", f"{name}.second"]) == [
                f"{name}.first",
                f"{name}.second",
            ]
            await kernel.ask("wait", stage=fault_stage, handlers=[f"{name}.boom"])

            ok = await kernel.ask("intercept", stage=stage, payload={"name": "ok"}, ctx={"session": "s1"})
            assert ok == {"decision": "patch", "payload": {"name": "ok", "seen_by": ["first", "second"]}}
            bad = await kernel.ask("intercept", stage=stage, payload={"name": "bad"})
            assert bad == {"decision": "cancel", "reason": "second refuses bad", "handler": f"{name}.second"}
            other = await kernel.ask("intercept", stage=stage, payload={"name": "other"})
            assert other == {"decision": "patch", "payload": {"name": "other", "seen_by": ["second"]}}
            fault = await kernel.ask("intercept", stage=fault_stage, payload={})
            assert fault == {
                "decision": "cancel",
                "reason": f"{name}.boom is fail-closed and failed: raised RuntimeError: boom",
                "handler": f"{name}.boom",
            }
            assert await kernel.ask("intercept", stage="custom.nobody", payload={}) == {"decision": "continue"}

            # The module stops cleanly: its fail-closed handler's guard record keeps its stage cancelled.
            await module_stack.aclose()
            await kernel.ask("wait", stage=stage, handlers=[])
            await kernel.ask("wait", stage=fault_stage, handlers=[])
            held = await kernel.ask("intercept", stage=fault_stage, payload={})
            assert held["decision"] == "cancel" and held["handler"] == f"{name}.boom"
            assert held["reason"].startswith(f"{name}.boom is gone since "), held
            assert await kernel.ask("intercept", stage=stage, payload={"name": "bad"}) == {"decision": "continue"}


async def test_the_js_kernel_refuses_a_numeric_instance_as_the_python_kernel_does(nats_url: str) -> None:
    """An announcement whose instance is the number 5, under the key ``<module>.5``: both kernels ignore it."""
    forged, honest = unique("num"), unique("str")
    stage = f"custom.{forged}"
    decls = {name: declare(name, "h", stage, timeout=1.0) for name in (forged, honest)}
    node()
    async with Bus(nats_url, name="operator") as operator:
        view = await operator.middleware.start()
        for decl in decls.values():
            await view.approve(decl)
        kv = await open_bucket(operator.port, MODULES_BUCKET)
        async with js_process("kernel.js", "--servers", nats_url) as (kernel, _):
            numeric = Announcement(forged, "5", f"hookbus.mw.{forged}", 60.0, False, (decls[forged],))
            await kv.put(numeric.key, orjson.dumps({**orjson.loads(numeric.to_bytes()), "instance": 5}))
            barrier = Announcement(honest, "7", f"hookbus.mw.{honest}", 60.0, False, (decls[honest],))
            await kv.put(barrier.key, barrier.to_bytes())  # watched after the forged one: once seen, both were read
            assert await kernel.ask("wait", stage=stage, handlers=[f"{honest}.h"]) == [f"{honest}.h"]
            await wait_for_chain(operator, stage, [f"{honest}.h"], WAIT)
            assert f"{forged}.h" not in view.declarations()
