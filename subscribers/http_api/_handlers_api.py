"""``GET /api/handlers``: the workspace's WASM plugins and the bus's handler records, read-only (same token).

Plugins are read from their manifests (``<workspace>/plugins/*/plugin.toml``,
as ``hookbus plugins list`` reads them, without compiling any WASM); records
from the drafts bucket, each with its trust state as the kernel's view sees it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from bus._core.errors import HookbusError, RecordError
from bus._middleware.kernel.view import View
from bus._records.record import Record
from bus._records.store import every_record
from subscribers.http_api._console_api import CONSOLE
from subscribers.plugins._manifest import MANIFEST_FILE, PLUGINS_DIR, load_manifest


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/handlers", handlers)


async def handlers(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    try:
        records = await every_record(console.bus.port)
    except HookbusError as exc:  # JetStream off, or the bucket did not load in time
        body = {"plugins": plugins(console.workspace), "records": [], "records_error": str(exc)}
    else:
        body = {"plugins": plugins(console.workspace), "records": record_rows(records, console.view)}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def plugins(workspace: Path) -> list[dict[str, Any]]:
    """Each plugin folder: its manifest's name, version, events and limits, or why it is refused."""
    root = workspace / PLUGINS_DIR
    folders = sorted(p for p in root.iterdir() if (p / MANIFEST_FILE).is_file()) if root.is_dir() else []
    out: list[dict[str, Any]] = []
    for folder in folders:
        try:
            m = load_manifest(folder)
        except HookbusError as exc:
            out.append({"name": folder.name, "error": str(exc)})
            continue
        out.append(
            {
                "name": m.name,
                "version": m.version,
                "description": m.description,
                "events": list(m.patterns),
                "memory_mb": m.memory_bytes // (1024 * 1024),
                "timeout_ms": m.timeout_ms,
            }
        )
    return out


def record_rows(records: dict[str, Record | RecordError], view: View) -> list[dict[str, Any]]:
    """Each stored record (``<module>.<name>``) with its stage and its trust state."""
    rows: list[dict[str, Any]] = []
    for key in sorted(records):
        record = records[key]
        if isinstance(record, RecordError):
            rows.append({"name": key, "error": record.reason})
            continue
        module = key.partition(".")[0]
        identity = record.identity(module)
        rows.append(
            {
                "name": key,
                "stage": record.stage,
                "enabled": record.enabled,
                "state": _state(key, identity, view),
                "identity": identity,
            }
        )
    return rows


def _state(qualname: str, identity: str, view: View) -> str:
    if identity in view.rejected.get(qualname, ()):
        return "rejected"
    approved = view.approved.get(qualname)
    if approved == identity:
        return "approved"
    return "waiting for approval" if approved is None else "changed, waiting for approval"
