"""The JS kernel of examples/js composes as the Python kernel does: priority and approval order, when, switches."""

from __future__ import annotations

from typing import Any

from bus import Bus, Module, Patch
from bus._switching import disable_handler, grant_handler
from bus.testing import serving, wait_for_chain
from tests.conftest import unique
from tests.middleware.test_protocol_js import approve, js_process, node


def _appender(mod: Module, stage: str, name: str, **options: Any) -> None:
    async def handler(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "seen": [*payload.get("seen", []), name]})

    mod.stage(stage, name=name, **options)(handler)


async def test_the_js_kernel_orders_scopes_and_switches_like_the_python_kernel(nats_url: str) -> None:
    node()
    mod = Module(unique("jscomp"))
    stage = f"custom.{unique('j')}"
    for name, options in (
        ("alpha", {}),
        ("beta", {}),
        ("gamma", {"when": {"agents": ["eva*"], "users": ["a?"]}}),
        ("delta", {"priority": 50, "after": "gamma"}),
        ("zeta", {"priority": 10}),
    ):
        _appender(mod, stage, name, **options)
    bag_stage = f"custom.{unique('bag')}"
    _appender(mod, bag_stage, "aa", inputs=["zz.out"])  # the consumer: first by name and by approval
    _appender(mod, bag_stage, "zz", outputs="out")
    qual = {decl.name: decl.qualname for decl in mod.declarations}
    expected = [qual[n] for n in ("zeta", "beta", "gamma", "delta", "alpha")]
    async with Bus(nats_url, name="operator") as operator, serving(mod, nats_url):
        for name in ("zeta", "beta", "gamma", "alpha", "delta", "aa", "zz"):  # approval order: beta/gamma/alpha
            await approve(operator, qual[name])
        producer_first = [qual["zz"], qual["aa"]]
        await wait_for_chain(operator, bag_stage, producer_first)
        await wait_for_chain(operator, stage, expected)
        async with js_process("kernel.js", "--servers", nats_url) as (kernel, _):
            assert await kernel.ask("wait", stage=stage, handlers=expected) == expected
            assert await kernel.ask("wait", stage=bag_stage, handlers=producer_first) == producer_first
            for ctx, seen in (
                ({"agent": "eva-1", "user": "ab"}, ["zeta", "beta", "gamma", "delta", "alpha"]),
                ({"agent": "eva-1", "user": "abc"}, ["zeta", "beta", "delta", "alpha"]),
                ({"agent": "bob", "user": "ab"}, ["zeta", "beta", "delta", "alpha"]),
            ):
                js = await kernel.ask("intercept", stage=stage, payload={}, ctx=ctx)
                assert js == {"decision": "patch", "payload": {"seen": seen}}, ctx
                assert await operator.intercept(stage, {}, ctx) == Patch({"seen": seen}), ctx
            # One bucket, delivered in order: a kernel that sees zeta disabled has seen alpha's grant too.
            await grant_handler(operator, qual["alpha"], "eva-1")
            await disable_handler(operator, qual["zeta"])
            rest = [qual[n] for n in ("beta", "gamma", "delta", "alpha")]
            assert await kernel.ask("wait", stage=stage, handlers=rest) == rest
            await wait_for_chain(operator, stage, rest)
            for ctx, seen in (
                ({"agent": "eva-1", "user": "ab"}, ["beta", "gamma", "delta", "alpha"]),
                ({"agent": "bob"}, ["beta", "delta"]),
            ):
                js = await kernel.ask("intercept", stage=stage, payload={}, ctx=ctx)
                assert js == {"decision": "patch", "payload": {"seen": seen}}, ctx
                assert await operator.intercept(stage, {}, ctx) == Patch({"seen": seen}), ctx
