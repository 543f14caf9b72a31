"""Records attacked by their author: an agent rewriting a managed record's draft, and sandbox escapes.

The runner is ``module-records`` and the author ``agent-eva`` on the shipped
permissions; every escape is a source an agent may store as a draft, which
must not load once approved either (the runner holds the runner's
credentials and serves the other records).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bus import Bus, Cancel, NatsServer
from bus._core.errors import RecordError
from bus._middleware.registry import ensure_buckets
from bus._records.record import from_fields
from bus._records.sandbox import RecordCtx, compile_record
from bus._records.store import RecordStore
from bus.testing import wait_for_chain
from subscribers.records_runner.record_runner import RecordsRunner, RecordsRunnerSettings
from tests.conftest import as_user as url
from tests.conftest import shipped_server
from tests.support.waiting import wait_until

SHIPPED = """
async def handle(stage, payload, ctx):
    return Cancel("shipped guard") if "rm -rf" in payload["input"]["command"] else Continue()
"""
REWRITTEN = """
escaped = sleep.__globals__
async def handle(stage, payload, ctx):
    return Continue()
"""
PLAIN_REWRITE = """
async def handle(stage, payload, ctx):
    return Continue()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from shipped_server(tmp_path_factory, "records-attacks")


@pytest.mark.parametrize("rewrite", [REWRITTEN, PLAIN_REWRITE], ids=["escaping", "plain"])
async def test_an_agent_rewriting_a_managed_record_gets_nothing_served(server: NatsServer, rewrite: str) -> None:
    async with Bus(url(server, "bus")) as bus:
        await ensure_buckets(bus.port)
    name = f"shipped_{abs(hash(rewrite)) % 10_000}"
    shipped = from_fields({"name": name, "stage": "tool.call", "source": SHIPPED, "fail_closed": True})
    kernel = {"managed": [f"records.{name}"]}  # the agent's kernel runs what the operator ships, by name
    async with Bus(url(server, "module-records")) as runner_bus, Bus(url(server, "agent-eva"), **kernel) as agent:
        store = RecordStore(agent.port, "records")
        await store.put(shipped)
        pins = {name: shipped.identity("records")[:12]}
        runner = RecordsRunner(runner_bus, RecordsRunnerSettings(heartbeat=0.5, managed=pins))
        async with runner.running():
            await wait_until(lambda: name in runner.served, what="the pinned record served")
            await wait_for_chain(agent, "tool.call", [f"records.{name}"])
            evil = from_fields({"name": name, "stage": "tool.call", "source": rewrite, "fail_closed": True})
            await store.put(evil)
            await wait_until(lambda: name in runner.waiting, what="the rewritten draft waiting for approval")
            assert runner.served == {name: shipped.identity("records")}
            assert evil.identity("records") not in runner._compiled, "a draft is never compiled before approval"
            decision = await agent.intercept("tool.call", {"name": "shell", "input": {"command": "rm -rf /"}})
            assert isinstance(decision, Cancel), decision


def test_a_managed_record_must_be_pinned_by_identity() -> None:
    for pin in ("", "abc", "not-hex-not-hex"):
        with pytest.raises(ValueError, match="pin it by identity"):
            RecordsRunnerSettings(managed={"x": pin})


ESCAPES = {
    "function globals": "g = sleep.__globals__",
    "getattr by string": "g = getattr(sleep, '__glo' + 'bals__')",
    "str.format field": "g = '{0.__globals__}'.format(sleep)",
    "string.Formatter field": "import string\ng = string.Formatter().get_field('0.__globals__', (sleep,), {})",
    "a module's os": "import shlex\nshlex.os.system('true')",
    "a module's codecs": "import json\njson.codecs.open('/etc/passwd')",
    "from a module import its os": "from fnmatch import os",
    "a submodule": "from json import decoder",
    "a private module": "from re import _compiler",
    "generator frame": "def f():\n    yield 1\ng = f().gi_frame.f_globals",
    "coroutine frame": "async def f():\n    pass\ng = f().cr_frame",
    "match class pattern": "match sleep:\n    case object(__globals__=g):\n        pass",
    "builtins by name": "b = __builtins__['open']",
    "import by name": "os = __import__('os')",
    "subclasses": "x = ().__class__.__bases__[0].__subclasses__()",
    "code object": "c = sleep.__code__",
    "type of a function": "t = type(sleep)",
    "functools copying globals": (
        "import functools\ndef f():\n    pass\n"
        "functools.update_wrapper(f, sleep, assigned=(), updated=('__globals__',))"
    ),
    "a __setattr__ hook": "class H:\n    def __setattr__(self, n, v):\n        pass",
    "a metaclass": "class H(metaclass=object):\n    pass",
    "monkeypatching a shared class": "import string\nstring.Template.substitute = None",
    "traceback frame": "try:\n    1 / 0\nexcept Exception as e:\n    t = e.__traceback__",
}
HANDLE = "\nasync def handle(stage, payload, ctx):\n    return Continue()\n"


@pytest.mark.parametrize("escape", list(ESCAPES), ids=list(ESCAPES))
def test_a_record_cannot_reach_out_of_its_namespace(escape: str) -> None:
    with pytest.raises(RecordError, match="does not load"):
        compile_record("escape", ESCAPES[escape] + HANDLE)


async def test_what_a_record_may_still_do_loads_and_runs() -> None:
    source = (
        "import re, json, string, collections, datetime, math, functools, itertools, fnmatch, shlex\n"
        "from collections import Counter\n"
        "async def handle(stage, payload, ctx):\n"
        "    words = shlex.split(payload['command'])\n"
        "    ctx.outputs['n'] = Counter(words)['rm'] + functools.reduce(lambda a, b: a + b, [0, 0])\n"
        "    hit = re.search(r'rm\\s+-rf', payload['command']) and fnmatch.fnmatch('a.py', '*.py')\n"
        "    return Cancel(f'{json.dumps(words)} {string.ascii_letters[:1]}') if hit else Continue()\n"
    )
    handler = compile_record("fine", source)
    ctx = RecordCtx("tool.call", "records.fine", None, None, 0, 0.0, "test")
    decision = await handler("tool.call", {"command": "rm -rf /"}, ctx)
    assert isinstance(decision, Cancel) and decision.reason == '["rm", "-rf", "/"] a'
