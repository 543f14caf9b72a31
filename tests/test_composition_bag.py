"""The per-turn bag against a real server: producers before consumers, inputs in the context, required inputs,
the bag cleared with the next user message, a cycle falling back to priority, hostile outputs refused."""

from __future__ import annotations

from typing import Any

from bus import Bus, Continue, Module, Patch, StageCtx
from bus.testing import JournalRecorder, serving, wait_for_chain

from .conftest import unique
from .waiting import wait_until


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
