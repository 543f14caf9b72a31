"""The console's API routes: journal, session timeline, middleware chains and approvals, status, live events.

Each route calls what the matching command calls (``hookbus journal`` ->
:class:`~subscribers.journal._store.JournalStore`, ``journal --events`` ->
:mod:`subscribers.history._timeline`, ``chain``/``approvals`` -> the kernel's
:class:`~bus._middleware.kernel.view.View`, ``approve``/``reject``/``detach`` ->
:mod:`bus._operator`, ``enable``/``disable`` -> :mod:`bus._switching`, ``status`` ->
:mod:`bus._status_report`), so the console
is no second path. Actions are journaled with ``console`` as the actor.

::

    GET  /api/journal?kind=&point=&who=&decision=&session=&since=&until=&limit=
    GET  /api/journal/timeline?session=S[&since_s=]   events (recorded history) and entries, in time order
    GET  /api/middleware                              every stage's chain, holds and approval queue
    POST /api/middleware/approve   {"name"}           approve a waiting handler (or a module's)
    POST /api/middleware/reject    {"name"}           reject a waiting version (never called; a new one waits again)
    POST /api/middleware/detach    {"name"}           detach a gone fail-closed guard
    POST /api/middleware/enable    {"name"}           let a disabled handler run again
    POST /api/middleware/disable   {"name"}           stop calling a handler without stopping its module
    GET  /api/status                                  what ``hookbus status --json`` prints
    GET  /api/live?pattern=&session=&agent=           server-sent events (sampled above DISPLAY_RATE)
    GET  /api/live/{id}/payload                       the whole payload of a recent event
"""

from __future__ import annotations

import asyncio
import difflib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import orjson
from aiohttp import web

from bus._client import Bus
from bus._core.declaration import Declaration
from bus._core.errors import ConfigError, HookbusError, MiddlewareError
from bus._core.schema import decode
from bus._journal.entries import KINDS, canonical_time
from bus._middleware.guards import GuardRecord
from bus._middleware.kernel.approvals import queue
from bus._middleware.kernel.chain import StageChain
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.view import View
from bus._middleware.registry import TRUST_BUCKET, open_bucket
from bus._middleware.schema import SwitchRecordMsg, TrustRecord
from bus._middleware.trust import trust_key
from bus._operator import approve_journaled, detach_journaled, reject_journaled
from bus._presence import read_presence
from bus._runtime.quantities import parse_duration
from bus._service import ServiceContext
from bus._status_report import status_report
from bus._switching import disable_handler, enable_handler
from subscribers.history._timeline import MAX_ENTRIES, entry_lines, event_lines, merged
from subscribers.http_api._kernel_trust import Kernels, shown, waiting_words
from subscribers.http_api._live import LiveFeed, LiveFilter, next_batch, sse
from subscribers.journal._decisions import known_decisions
from subscribers.journal._store import DB_NAME, JournalStore, Query, entry_json

#: Who the console's actions are journaled as.
ACTOR: Final = "console"
#: The most journal rows one search returns.
MAX_ROWS: Final = 1000
#: A keep-alive comment on an idle live stream this often (proxies close silent connections).
KEEPALIVE_S: Final = 15.0


@dataclass
class Console:
    """What the console's routes work on: a Bus of its own, the kernel's view, the journal, the live feed."""

    bus: Bus
    view: View
    workspace: Path
    live: LiveFeed

    def journal(self) -> JournalStore:
        path = self.workspace / DB_NAME
        if not path.exists():
            message = f"no journal at {path} yet: the journal sink creates it with the first entry"
            raise web.HTTPNotFound(body=orjson.dumps({"error": message}), content_type="application/json")
        return JournalStore(path)


CONSOLE: Final = web.AppKey("console", Console)
#: What enabling and disabling call (``bus._switching``, as ``hookbus enable``/``disable``).
Switch = Callable[..., Awaitable[SwitchRecordMsg]]
_Done = TypeVar("_Done")


@asynccontextmanager
async def open_console(ctx: ServiceContext) -> AsyncIterator[Console]:
    """The console's own connection (a flood on the live view cannot cost the shared one its messages)."""
    async with AsyncExitStack() as stack:
        bus = await stack.enter_async_context(ctx.connect("hookbus-console"))
        view = await bus.middleware.start()
        live = LiveFeed(bus)
        stack.push_async_callback(live.close)
        yield Console(bus, view, ctx.workspace, live)


def add_routes(app: web.Application, console: Console) -> None:
    app[CONSOLE] = console
    app.on_shutdown.append(_end_live_streams)
    app.router.add_get("/api/journal", journal)
    app.router.add_get("/api/journal/timeline", timeline)
    app.router.add_get("/api/middleware", middleware)
    app.router.add_post("/api/middleware/approve", approve)
    app.router.add_post("/api/middleware/reject", reject)
    app.router.add_post("/api/middleware/detach", detach)
    app.router.add_post("/api/middleware/enable", enable)
    app.router.add_post("/api/middleware/disable", disable)
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/live", live)
    app.router.add_get("/api/live/{id}/payload", live_payload)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _bad(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(body=orjson.dumps({"error": message}), content_type="application/json")


# -- journal


def journal_query(params: Any) -> Query:
    """A journal search from query parameters, checked as ``hookbus journal`` checks its flags."""
    kind = params.get("kind") or None
    if kind is not None and kind not in KINDS:
        raise _bad(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    decision = params.get("decision") or None
    if decision is not None and decision not in known_decisions():
        raise _bad(f"decision {decision!r} is not a journal decision (valid: {', '.join(known_decisions())})")
    try:
        limit = int(params.get("limit") or 100)
        since, until = (canonical_time(params[b]) if params.get(b) else None for b in ("since", "until"))
    except ValueError:
        raise _bad(f"limit {params.get('limit')!r} is not a whole number") from None
    except HookbusError as exc:
        raise _bad(str(exc)) from None
    if not 1 <= limit <= MAX_ROWS:
        raise _bad(f"limit {limit} must be between 1 and {MAX_ROWS}")
    point, who, session = (params.get(name) or None for name in ("point", "who", "session"))
    return Query(point, who, decision, session, kind, since, until, limit=limit)


async def journal(request: web.Request) -> web.Response:
    query = journal_query(request.query)
    store = request.app[CONSOLE].journal()
    try:
        rows = await asyncio.to_thread(store.query, query)
    finally:
        store.close()
    return _json({"entries": [entry_json(seq, row) for seq, row in reversed(rows)]})


async def timeline(request: web.Request) -> web.Response:
    """A session's events (where recorded) and journal entries side by side, in time order."""
    session = request.query.get("session")
    if not session:
        raise _bad("give a session: the timeline is one session's")
    try:
        since_s = parse_duration(request.query.get("since") or "7d", "since")
    except ConfigError as exc:
        raise _bad(str(exc)) from None
    console = request.app[CONSOLE]
    store = console.journal()
    try:
        rows = await asyncio.to_thread(store.query, Query(session=session, limit=MAX_ENTRIES))
    finally:
        store.close()
    recorded, note = True, None
    try:
        events = await event_lines(console.bus, session, since_s)
    except ConfigError as exc:  # nothing recorded: the journal's side alone
        events, recorded, note = [], False, str(exc)
    lines = [line.json for line in merged(events, entry_lines([row.entry for _, row in rows]))]
    return _json({"session": session, "recorded": recorded, "note": note, "lines": lines})


# -- middleware


def _link(link: Link, view: View, state: str | None = None) -> dict[str, Any]:
    decl = link.decl
    instances = [heard for ann, heard in view.instances.values() if ann.module == decl.module]
    return {
        "name": decl.qualname,
        "module": decl.module,
        "state": state or link.trust.value,
        "fail_closed": decl.fail_closed,
        "timeout": decl.timeout,
        "match": sorted(link.match) if link.match else None,
        "before": list(decl.before),
        "after": list(decl.after),
        "instances": len(instances),
        "last_seen_s": round(time.monotonic() - max(instances), 1) if instances else None,
        "hold": link.hold,
        "identity": link.identity,
        "agents": _granted(view, decl.qualname),
    }


def _granted(view: View, qualname: str) -> list[str] | None:
    """The agents an operator granted the handler to; None: every agent (global)."""
    switches = view.switches.get(qualname)
    return sorted(switches.agents) if switches is not None and switches.agents is not None else None


@dataclass(frozen=True, slots=True)
class _Trust:
    """What the chains are shown against: the trust store's records and the present kernels' settings."""

    records: dict[str, TrustRecord]
    kernels: Kernels


def _runs(link: Link, view: View, trust: _Trust, state: str | None = None) -> dict[str, Any]:
    out = _link(link, view, state)
    word, by = shown(out["state"], trust.records.get(link.decl.qualname))
    return out | {"shown": word, "by": by}


def _waits(link: Link, view: View, trust: _Trust) -> dict[str, Any]:
    out = _link(link, view, "waiting") | {"trust": link.trust.value}
    eager = trust.kernels.trust_new
    first_sight = f"; {', '.join(eager)} approves it on first sight" if eager else ""
    return out | {"shown": "waiting", "by": waiting_words(link.trust.value) + first_sight}


def _chain(chain: StageChain, view: View, trust: _Trust) -> dict[str, Any]:
    managed = [link for link in chain.waiting if trust.kernels.managers(link.decl.qualname)]
    waiting = [link for link in chain.waiting if link not in managed]
    return {
        "stage": chain.stage,
        "broken": chain.broken,
        "guard": chain.guard,
        "links": [_runs(link, view, trust) for link in chain.links],
        "holds": [_runs(link, view, trust, "gone") for link in chain.holds],
        "waiting": [_waits(link, view, trust) for link in waiting],
        # run by another process's kernel, which manages them; every other kernel would wait for an approval
        "elsewhere": [
            _link(link, view, "managed")
            | {"shown": "managed", "by": ", ".join(trust.kernels.managers(link.decl.qualname))}
            for link in managed
        ],
        "disabled": [_runs(link, view, trust, "disabled") for link in chain.disabled],
        "rejected": [_runs(link, view, trust, "rejected") for link in chain.rejected],
    }


def declaration_diff(approved: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """A unified diff of the normalised declaration approved before and the one waiting now."""
    before = orjson.dumps(approved, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() if approved else ""
    after = orjson.dumps(now, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return list(difflib.unified_diff(before.splitlines(), after.splitlines(), "approved", "declared now", lineterm=""))


async def _trust_records(console: Console, names: set[str]) -> dict[str, TrustRecord]:
    """The trust store's record of each named handler (who approved it, how, as what), where there is one."""
    kv = await open_bucket(console.bus.port, TRUST_BUCKET)
    out: dict[str, TrustRecord] = {}
    for name in sorted(names):
        entry = await kv.get(name)
        if entry is None or not entry.value:
            continue
        try:
            out[name] = decode(entry.value, TrustRecord, "trust value", ValueError)
        except ValueError:
            continue  # unreadable: shown as a new declaration
    return out


async def _kernels(console: Console) -> Kernels:
    """The present processes' kernel settings (none known when presence cannot be read)."""
    try:
        present, _ = await read_presence(console.bus, within_s=2.0)
    except HookbusError:
        return Kernels()
    return Kernels.of(present)


async def middleware(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    view = console.view
    kernels = await _kernels(console)
    waiting = [w for w in queue(view) if not kernels.managers(w.decl.qualname)]
    names = {trust_key(link.decl) for chain in view.chains.values() for link in chain.links + chain.holds}
    records = await _trust_records(console, names | {trust_key(w.decl) for w in waiting})
    trust = _Trust(records, kernels)
    approvals = [
        {
            "name": w.decl.qualname,
            "stage": w.decl.stage,
            "state": w.state.value,
            "fail_closed": w.decl.fail_closed,
            "identity": w.decl.identity(),
            "diff": declaration_diff(_declared(records.get(trust_key(w.decl))), w.decl.to_wire()),
        }
        for w in waiting
    ]
    chains = [_chain(view.chains[stage], view, trust) for stage in sorted(view.chains)]
    return _json({"chains": chains, "approvals": approvals})


def _declared(record: TrustRecord | None) -> dict[str, Any] | None:
    return record.declaration if record is not None else None


async def _name(request: web.Request) -> str:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise _bad(f"request body is not valid JSON ({exc})") from None
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name:
        raise _bad('give {"name": "module.handler"} (or a module)')
    return name


async def approve(request: web.Request) -> web.Response:
    return await _operate(request, "approve", "approved", approve_journaled, _version)


async def reject(request: web.Request) -> web.Response:
    return await _operate(request, "reject", "rejected", reject_journaled, _version)


async def detach(request: web.Request) -> web.Response:
    return await _operate(request, "detach", "detached", detach_journaled, _guard)


def _version(decl: Declaration) -> dict[str, str]:
    return {"name": decl.qualname, "identity": decl.identity()}


def _guard(record: GuardRecord) -> dict[str, str]:
    return {"name": record.decl.qualname, "identity": record.identity}


async def _operate(
    request: web.Request,
    verb: str,
    done_key: str,
    act: Callable[[Bus, View, str, str], Awaitable[list[_Done]]],
    row: Callable[[_Done], dict[str, str]],
) -> web.Response:
    """An operator's act on the handlers a ``{"name"}`` body designates, journaled with the console as actor.

    A refusal (nothing waiting, a guard still alive) is 409; the bus refusing the write or unreachable, 502.
    """
    name = await _name(request)
    console = request.app[CONSOLE]
    try:
        done = await act(console.bus, console.view, name, ACTOR)
    except MiddlewareError as exc:
        return _json({"error": str(exc)}, 409)
    except HookbusError as exc:  # the bus refused the write (permissions), or is unreachable
        return _json({"error": f"{verb} {name}: {exc}"}, 502)
    return _json({done_key: [row(d) for d in done]})


async def enable(request: web.Request) -> web.Response:
    return await _switch(request, "enable", enable_handler)


async def disable(request: web.Request) -> web.Response:
    return await _switch(request, "disable", disable_handler)


async def _switch(request: web.Request, verb: str, act: Switch) -> web.Response:
    name = await _name(request)
    try:
        record = await act(request.app[CONSOLE].bus, name, actor=ACTOR)
    except MiddlewareError as exc:
        return _json({"error": str(exc)}, 409)
    except HookbusError as exc:
        return _json({"error": f"{verb} {name}: {exc}"}, 502)
    return _json({"name": name, "enabled": record.enabled})


# -- status


async def status(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    report = await status_report(console.bus, console.view)
    return _json({"nats": console.bus.servers, **report})


# -- live


async def live(request: web.Request) -> web.StreamResponse:
    """Server-sent events: ``hello`` (the display rate), then ``events`` batches and ``sampled`` counts."""
    query = request.query
    try:
        wanted = LiveFilter.of(query.get("pattern"), query.get("session"), query.get("agent"))
    except HookbusError as exc:
        raise _bad(str(exc)) from None
    feed = request.app[CONSOLE].live
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
    await response.prepare(request)
    viewer = await feed.join(wanted)
    try:
        await response.write(sse("hello", {"rate": feed.rate, "pattern": wanted.pattern}))
        while not viewer.ended:
            await response.write(await next_batch(viewer, KEEPALIVE_S))
    except ConnectionResetError:
        pass  # the browser left
    finally:
        await feed.leave(viewer)
    return response


async def _end_live_streams(app: web.Application) -> None:
    """Before the server waits for open connections to finish: the live streams never would."""
    await app[CONSOLE].live.close()


async def live_payload(request: web.Request) -> web.Response:
    event = request.app[CONSOLE].live.recent(request.match_info["id"])
    if event is None:
        return _json({"error": "no such recent event (the live view keeps the last ones only)"}, 404)
    try:
        return _json({"id": event.id, "payload": await event.full_payload()})
    except HookbusError as exc:
        return _json({"error": str(exc)}, 502)
