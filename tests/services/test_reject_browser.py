"""The console's Reject button and the Hooks page's plugins and records, in a real browser against `hookbus up`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Cancel, Module, Stage
from bus._records.record import from_fields
from bus._records.store import RecordStore
from bus.testing import serving
from tests.cli.test_cli import UpProcess
from tests.conftest import unique

# The browser fixtures of the console's browser test, reused (importing it skips this module without selenium).
from tests.services.test_console_browser import Console
from tests.services.test_console_browser import browser as browser
from tests.services.test_console_browser import shots as shots
from tests.support.plugin_support import write_plugin


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("reject-browser"))
    yield process
    process.close()


async def test_reject_in_the_browser_and_plugins_and_records_on_the_hooks_page(
    up: UpProcess,
    browser: Any,
    shots: Path,
) -> None:
    console = Console(up, browser, shots)
    name = unique("brej")
    qualname = f"{name}.h"
    module = Module(name)

    @module.stage(Stage.TOOL_CALL.value)
    async def h(stage: str, payload: dict[str, Any]) -> Cancel:
        return Cancel("never approved")

    plugin = unique("plug")
    write_plugin(console.workspace, plugin, "(component)")
    async with Bus(up.nats_url) as bus, serving(module, up.nats_url):
        source = "async def handle(stage, payload, ctx):\n    return Continue()\n"
        await RecordStore(bus.port, "brecs").put(from_fields({"name": "r1", "stage": "tool.call", "source": source}))
        console.login()
        console.tab("middleware")
        box = console.wait(lambda: console.first(f".approval[data-name='{qualname}']"), f"{qualname} waiting")
        box.find_element("css selector", "button.reject").click()
        console.confirm()
        console.wait(lambda: f"reject {qualname}: done" in console.text_of("mw-state"), "the rejection done")
        console.wait(lambda: console.first(f"tr.link[data-name='{qualname}'].state-rejected"), "shown rejected")
        assert console.first(f".approval[data-name='{qualname}']") is None, "out of the approval queue"
        console.shot("middleware-rejected")

        console.tab("hooks")
        console.wait(lambda: plugin in console.text_of("plugin-rows"), "the plugin listed")
        row = console.wait(lambda: console.first("#record-rows tr[data-name='brecs.r1']"), "the record listed")
        assert "waiting for approval" in row.text
        console.shot("hooks-plugins-records")
