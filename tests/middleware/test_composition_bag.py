"""The per-turn bag against a real server: producers before consumers, inputs in the context, required inputs,
the bag cleared with the next user message, a cycle falling back to priority, hostile outputs refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from bus import Bus, Continue, Module, Patch, StageCtx
from bus.testing import JournalRecorder, serving, wait_for_chain
from subscribers.http_api._console_api import Console
from subscribers.http_api._live import LiveFeed
from subscribers.http_api.server import make_app, serve
from tests.conftest import run_cli, unique
from tests.support.waiting import wait_until

TOKEN = "b" * 32


async def test_producer_runs_first_and_the_consumer_reads_its_value(kernel: Bus, nats_url: str) -> None:
    stage = f"custom.{unique('b')}"
    producer, consumer = Module(unique("prod")), Module(unique("cons"))
    seen: list[dict[str, Any]] = []

    # Declared first and named to sort first: only the bag puts it after the producer.
    @consumer.stage(stage, inputs=[{"key": "retrieval.query", "required": True}, {"key": "lang.user", "default": "en"}])
    async def answer(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Patch:
        seen.append(dict(ctx.inputs))
        return Patch({**payload, "query": ctx.inputs["retrieval.query"]})

    @producer.stage(stage, outputs=["retrieval.query", "intent.label"])
    async def retrieve(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        ctx.outputs["retrieval.query"] = payload["text"].upper()
        ctx.outputs["not.declared"] = "dropped by the module"
        return Continue()

    async with serving(consumer, nats_url), serving(producer, nats_url):
        await wait_for_chain(kernel, stage, [f"{producer.name}.retrieve", f"{consumer.name}.answer"])
        got = await kernel.intercept(stage, {"text": "hello"}, {"session": "s1"})
        assert got == Patch({"text": "hello", "query": "HELLO"})
    assert seen == [{"retrieval.query": "HELLO", "lang.user": "en"}]
    view = kernel.middleware.view
    assert view is not None
    assert kernel.middleware.bags.of("s1") == {"retrieval.query": "HELLO"}


async def test_required_input_missing_skips_the_consumer_and_the_bag_lives_for_one_message(
    kernel: Bus, nats_url: str
) -> None:
    """The bag is written on user.message and read on a later stage; the next user.message clears it."""
    mod = Module(unique("turn"))
    later = f"custom.{unique('l')}"
    calls: list[str] = []

    @mod.stage("user.message", outputs="lang", match=None)
    async def detect(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        if payload.get("text") == "bonjour":
            ctx.outputs["detect.lang"] = "fr"
        return Continue()

    @mod.stage(later, inputs=[{"key": "detect.lang", "required": True}])
    async def reply_in(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Patch:
        calls.append(ctx.inputs["detect.lang"])
        return Patch({"lang": ctx.inputs["detect.lang"]})

    @mod.stage(later, after="reply_in")
    async def after_it(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "after": True})

    journal = await JournalRecorder().attach(kernel)
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, later, [f"{mod.name}.reply_in", f"{mod.name}.after_it"])
        await wait_for_chain(kernel, "user.message", [f"{mod.name}.detect"])
        ctx = {"session": unique("s")}
        await kernel.intercept("user.message", {"text": "bonjour"}, ctx)
        assert await kernel.intercept(later, {}, ctx) == Patch({"lang": "fr", "after": True})
        await kernel.intercept("user.message", {"text": "hello"}, ctx)  # a new message: a new, empty bag
        assert await kernel.intercept(later, {}, ctx) == Patch({"after": True})  # skipped; the rest still runs
        assert await kernel.intercept(later, {}, {"session": "another"}) == Patch({"after": True})
    assert calls == ["fr"]

    def skipped() -> list[Any]:
        return [e for e in journal.entries if e.who == f"{mod.name}.reply_in" and e.decision == "skipped"]

    await wait_until(lambda: len(skipped()) == 2, what="two skipped entries")
    assert "required input detect.lang is not in the bag" in (skipped()[0].cause or "")


async def test_a_bag_cycle_falls_back_to_priority_and_says_so(kernel: Bus, nats_url: str) -> None:
    stage = f"custom.{unique('c')}"
    mod = Module(unique("cyc"))
    journal = await JournalRecorder().attach(kernel)

    @mod.stage(stage, inputs=["b.out"], outputs="out", priority=1)
    async def a(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({"seen": [*payload.get("seen", []), "a"]})

    @mod.stage(stage, inputs=["a.out"], outputs="out", priority=2)
    async def b(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({"seen": [*payload.get("seen", []), "b"]})

    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.b", f"{mod.name}.a"])  # priority decides
        assert await kernel.intercept(stage, {}) == Patch({"seen": ["b", "a"]})

    def notes() -> list[Any]:
        return [e for e in journal.entries if e.point == stage and e.decision == "reordered"]

    await wait_until(lambda: notes(), what="the journal's note of the cycle")
    assert "form a cycle" in (notes()[0].cause or "")


async def test_the_kernel_keeps_only_declared_outputs_within_bounds(kernel: Bus, nats_url: str) -> None:
    """A hostile module reports outputs it did not declare and one too large: the kernel keeps neither."""
    stage = f"custom.{unique('h')}"
    mod = Module(unique("hostile"))

    @mod.stage(stage, outputs=["small", "big"])
    async def writer(stage: str, payload: dict[str, Any], ctx: StageCtx) -> Continue:
        ctx.outputs["writer.small"] = {"ok": True}
        ctx.outputs["writer.big"] = "x" * 100_000
        return Continue()

    original = mod.answer

    async def forging(request: Any, bus: Any = None) -> Any:
        reply = await original(request, bus)
        for reaction in reply.reactions:
            reaction.outputs = {**reaction.outputs, "someone.else": "forged"}
        return reply

    mod.answer = forging  # type: ignore[method-assign]  # the module lies on the wire
    async with serving(mod, nats_url):
        await wait_for_chain(kernel, stage, [f"{mod.name}.writer"])
        await kernel.intercept(stage, {}, {"session": "hostile"})
    assert kernel.middleware.bags.of("hostile") == {"writer.small": {"ok": True}}


async def test_bag_listing_on_the_cli_and_the_api(kernel: Bus, bus: Bus, nats_url: str, tmp_path: Path) -> None:
    stage = f"custom.{unique('p')}"
    mod = Module(unique("ports"))

    @mod.stage(stage, outputs=["intent.label"])
    async def classify(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    @mod.stage(stage, inputs=[{"key": "intent.label", "required": True}, {"key": "lang.user", "default": "en"}])
    async def route(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    view = await bus.middleware.start()
    app = make_app(tmp_path / "hooks.json", TOKEN, console=Console(bus, view, tmp_path, LiveFeed(bus)))
    async with serving(mod, nats_url), serve(app, "127.0.0.1", 0) as base, aiohttp.ClientSession() as http:
        await wait_until(lambda: f"{mod.name}.route" in view.declarations(), what="the module")
        done = await asyncio.to_thread(run_cli, "bag", "--nats-url", nats_url)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        label = lines.index("intent.label")
        assert lines[label + 1] == f"  writes  {mod.name}.classify  ({stage})"
        assert lines[label + 2] == f"  reads   {mod.name}.route  ({stage}, required)"
        assert f"  reads   {mod.name}.route  ({stage}, default 'en')" in lines
        async with http.get(f"{base}/api/bag") as refused:
            assert refused.status == 401
        async with http.get(f"{base}/v1/hooks/bag") as refused_too:
            assert refused_too.status == 401
        async with http.get(f"{base}/api/bag", headers={"Authorization": f"Bearer {TOKEN}"}) as answered:
            body = await answered.json()
            keys = {row["key"]: row for row in body["keys"]}
        async with http.get(f"{base}/v1/hooks/bag", headers={"Authorization": f"Bearer {TOKEN}"}) as agent_os:
            assert await agent_os.json() == body  # agent_os's path, the same listing
    assert body["standard"] == ["retrieval.query", "retrieval.source", "intent.label", "lang.user", "model.route"]
    assert keys["intent.label"]["producers"] == [{"handler": f"{mod.name}.classify", "stage": stage}]
    assert keys["lang.user"]["consumers"] == [
        {"handler": f"{mod.name}.route", "stage": stage, "port": "lang.user", "required": False, "default": "en"}
    ]
