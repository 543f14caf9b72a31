"""The console in a real browser (Debian's chromium, headless, through chromedriver) against a real `hookbus up`.

Log in, watch an emitted event arrive live, find a cancelled call in the
journal, approve a waiting guard and see the next intercept answered by it,
toggle a hook and see it stop running, watch the status page. A screenshot
of each page goes to a temporary directory (printed; never committed).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Cancel, Stage
from bus._presence import component, presence
from tests.cli.test_cli import UpProcess
from tests.conftest import IN_CI, require_binary
from tests.support.hooks_support import script, wait_for_file
from tests.support.mwproc import module_process
from tests.support.waiting import wait_until

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the test extra installs it
    if IN_CI:
        raise
    pytest.skip("selenium is not installed (pip install -e '.[test]')", allow_module_level=True)

#: Longest wait for the page to show something (the machine may be loaded; the happy path is fast).
PAGE_WAIT_S = 20


@pytest.fixture(scope="module")
def shots() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="hookbus-console-screenshots-"))
    print(f"console screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("console-browser"))
    yield process
    process.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = require_binary("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(require_binary("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


class Console:
    """The console page of one `hookbus up`, driven in the browser."""

    def __init__(self, up: UpProcess, driver: WebDriver, shots: Path) -> None:
        match = re.search(r"console\s+(http://\S+)", "\n".join(up.lines))
        assert match is not None, up.lines
        self.url = match.group(1)
        self.workspace = Path(re.search(r"workspace (\S+)", up.lines[0]).group(1))  # type: ignore[union-attr]
        self.token = (self.workspace / "api-token").read_text().strip()
        self.driver = driver
        self.shots = shots

    def find(self, element_id: str) -> Any:
        return self.driver.find_element(By.ID, element_id)

    def wait(self, condition: Any, what: str) -> Any:
        """What ``condition()`` returns once true; fails naming ``what`` and showing the page's states."""
        waiting = WebDriverWait(self.driver, PAGE_WAIT_S, ignored_exceptions=[StaleElementReferenceException])
        try:
            return waiting.until(lambda _: condition())
        except TimeoutException:
            states = [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, ".state, .error") if e.text]
            raise AssertionError(f"the page did not show {what} (it says: {states})") from None

    def first(self, css: str) -> Any:
        """The first element ``css`` selects, None if none (yet)."""
        return next(iter(self.driver.find_elements(By.CSS_SELECTOR, css)), None)

    def classes(self, css: str) -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).get_attribute("class") or "")

    def text_of(self, element_id: str) -> str:
        return str(self.find(element_id).text)

    def login(self) -> None:
        """Open the console, logging in unless the tab still holds the token (then the page logs itself in)."""
        self.driver.get(self.url)
        if self.driver.execute_script("return sessionStorage.getItem('hookbus-token')"):
            self.wait(lambda: self.find("tabs").is_displayed(), "the tabs with the kept token")
            return
        self.type("token", self.token)
        self.find("login").click()
        self.wait(lambda: self.find("tabs").is_displayed(), "the tabs after logging in")

    def type(self, element_id: str, text: str) -> None:
        field = self.find(element_id)
        field.clear()
        field.send_keys(text)

    def tab(self, name: str) -> None:
        self.find(f"tab-{name}").click()
        self.wait(lambda: self.find(f"page-{name}").is_displayed(), f"the {name} page")

    def confirm(self) -> None:
        alert = WebDriverWait(self.driver, PAGE_WAIT_S).until(lambda d: d.switch_to.alert)
        alert.accept()

    def shot(self, name: str) -> None:
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))


@pytest.fixture
def console(up: UpProcess, browser: WebDriver, shots: Path) -> Console:
    return Console(up, browser, shots)


def test_a_wrong_token_is_refused_and_the_right_one_opens_the_console(console: Console) -> None:
    console.driver.get(console.url)
    console.driver.execute_script("sessionStorage.clear()")
    console.driver.get(console.url)
    console.shot("login")
    console.type("token", "not-the-token")
    console.find("login").click()
    console.wait(lambda: "refused" in console.text_of("login-error"), "the refusal")
    assert not console.find("tabs").is_displayed()
    console.login()
    assert console.driver.execute_script("return sessionStorage.getItem('hookbus-token')") == console.token


async def test_an_emitted_event_appears_live_and_shows_its_envelope(console: Console, up: UpProcess) -> None:
    console.login()
    console.tab("live")
    console.type("live-session", "browser-live")
    console.find("live-apply").click()
    console.wait(lambda: console.text_of("live-state").startswith("live"), "the live stream connected")
    assert console.text_of("live-state") in ("live: every event", "live: events matching prx.>"), "in words"
    assert "sampled" in console.text_of("page-live"), "the page says the display is sampled above its rate"
    async with Bus(up.nats_url, source="browser-agent") as bus:
        await bus.emit("prx.lifecycle.tool_call", {"tool": "shell", "marker": "seen-live"}, session_id="browser-live")
        await bus.flush()
    row = console.wait(
        lambda: console.first("#live-rows tr.live-event"),
        "the event in the live table",
    )
    assert "prx.lifecycle.tool_call" in row.text and "browser-live" in row.text
    assert "browser-agent" in row.text, f"the event's source is named: {row.text}"
    console.find("live-pause").click()
    assert console.text_of("live-state").startswith("paused: "), "the paused state in words"
    console.find("live-pause").click()
    assert console.text_of("live-state") in ("live: every event", "live: events matching prx.>"), "in words again"
    row.click()
    console.wait(lambda: "seen-live" in console.text_of("live-envelope"), "the event's envelope")
    assert '"session_id": "browser-live"' in console.text_of("live-envelope")
    console.shot("live")


async def test_a_cancelled_call_is_found_in_the_journal(console: Console, up: UpProcess) -> None:
    stage = Stage.TOOL_CALL.value
    with module_process(up.nats_url, "jguard", stage, "--behaviour", "cancel"):
        async with Bus(up.nats_url, managed=["jguard.h"]) as kernel:
            view = await kernel.middleware.start()
            await view.wait_until(lambda: stage in view.chains and bool(view.chains[stage].links), 15)
            decision = await kernel.intercept(Stage.TOOL_CALL, {"name": "shell"}, {"session": "browser-journal"})
            assert isinstance(decision, Cancel)
    console.login()
    console.tab("journal")
    console.type("j-decision", "cancel")
    console.type("j-who", "jguard.h")

    def found() -> str:
        console.find("j-search").click()  # the sink stores entries a moment after they are published
        row = console.first("#j-rows tr")
        return str(row.text) if row is not None else ""

    text = console.wait(found, "the cancelled call in the journal")
    assert "cancel" in text and "denied by the process" in text and "jguard.h" in text
    assert re.search(r"\b\d+(\.\d{1,3})? ms\b", text), f"the duration formatted, not a raw float: {text}"
    console.shot("journal")
    console.type("j-decision", "")
    console.type("j-who", "")
    console.type("j-session", "browser-journal")
    console.find("j-timeline").click()
    console.wait(lambda: "jguard.h: cancel" in console.text_of("tl-rows"), "the session's timeline")
    console.shot("journal-timeline")


async def test_approving_a_waiting_guard_answers_the_next_intercept_by_it(console: Console, up: UpProcess) -> None:
    stage = Stage.TOOL_CALL.value
    danger = {"name": "shell", "input": {"command": "rm -rf /"}}
    with module_process(up.nats_url, "bguard", stage, "--behaviour", "guard", "--fail-closed"):
        async with Bus(up.nats_url) as kernel:
            view = await kernel.middleware.start()
            await view.wait_until(lambda: stage in view.chains and bool(view.chains[stage].waiting), 15)
            assert not isinstance(await kernel.intercept(Stage.TOOL_CALL, danger), Cancel), "not approved: no effect"
            console.login()
            console.tab("middleware")
            box = console.wait(
                lambda: next(
                    iter(console.driver.find_elements(By.CSS_SELECTOR, ".approval[data-name='bguard.h']")), None
                ),
                "bguard.h waiting for approval",
            )
            assert '"fail_closed": true' in box.text, "the declaration waiting for approval is shown"
            console.shot("middleware-waiting")
            box.find_element(By.CSS_SELECTOR, "button.approve").click()
            console.confirm()
            console.wait(lambda: "approve bguard.h: done" in console.text_of("mw-state"), "the approval done")
            console.wait(
                lambda: console.driver.find_elements(By.CSS_SELECTOR, "tr.link[data-name='bguard.h'].state-trusted"),
                "bguard.h trusted in its chain",
            )
            console.shot("middleware-approved")
            await view.wait_until(lambda: bool(view.chains[stage].links), 15)
            decision = await kernel.intercept(Stage.TOOL_CALL, danger)
            assert isinstance(decision, Cancel) and decision.reason == "only by hand"

            console.first("tr.link[data-name='bguard.h'] button.disable").click()
            console.confirm()
            console.wait(lambda: "disable bguard.h: done" in console.text_of("mw-state"), "the handler disabled")
            assert console.first("tr.link[data-name='bguard.h'].state-disabled") is not None
            console.shot("middleware-disabled")
            await view.wait_until(lambda: bool(view.chains[stage].disabled), 15)
            assert not isinstance(await kernel.intercept(Stage.TOOL_CALL, danger), Cancel), "disabled: not called"


async def test_a_handler_another_kernel_manages_is_shown_managed_there_as_the_journal_shows_it(
    console: Console, up: UpProcess
) -> None:
    stage = Stage.TOOL_CALL.value
    with module_process(up.nats_url, "mguard", stage, "--behaviour", "cancel"):
        async with Bus(up.nats_url, managed=["mguard.h"]) as kernel:
            parts = [component("agent", "browser-fleet-agent", "an agent of the test kernel")]
            async with presence(kernel, "browser test kernel", parts, heartbeat_s=1.0):
                view = await kernel.middleware.start()
                await view.wait_until(lambda: stage in view.chains and bool(view.chains[stage].links), 15)
                decision = await kernel.intercept(Stage.TOOL_CALL, {"name": "shell"}, {"session": "browser-managed"})
                assert isinstance(decision, Cancel), "the test kernel runs it: managed there"
                console.login()
                console.tab("middleware")
                row = console.wait(
                    lambda: console.first("tr.link[data-name='mguard.h'].state-managed"), "mguard.h managed"
                )
                assert "managed by browser test kernel" in row.text, row.text
                assert "waiting" not in row.text and "untrusted" not in row.text, row.text
                assert row.find_elements(By.CSS_SELECTOR, "button") == [], "nothing to approve or reject"
                assert console.first(".approval[data-name='mguard.h']") is None, "not in the approval queue"
                console.shot("middleware-managed-elsewhere")
                console.tab("status")
                console.wait(lambda: "browser-fleet-agent" in console.text_of("status-body"), "the agent named")
                assert "none" not in console.find("status-body").find_element(By.CSS_SELECTOR, ".status-agent").text
                assert "mguard.h" in console.find("status-body").find_element(By.CSS_SELECTOR, ".status-kernel").text
    console.tab("journal")
    console.type("j-who", "mguard.h")

    def found() -> str:
        console.find("j-search").click()  # the sink stores entries a moment after they are published
        row = console.first("#j-rows tr")
        return str(row.text) if row is not None else ""

    assert "cancel" in console.wait(found, "mguard.h deciding in the journal")
    console.type("j-who", "")


async def test_a_hook_made_and_disabled_in_the_browser_stops_running(console: Console, up: UpProcess) -> None:
    marks = console.workspace / "browser-marks"
    script(console.workspace, "browser-mark.sh", f'echo "$ZERO_HOOK_SESSION" >> {marks}\n')
    console.login()
    console.tab("hooks")
    hook = '{"event": "agent_end", "action": {"command": "./browser-mark.sh", "timeout_ms": 5000}, "enabled": true}'
    console.driver.execute_script("document.getElementById('hook-json').value = arguments[0]", hook)
    console.find("hook-save").click()
    console.wait(lambda: console.text_of("hooks-state").startswith("saved "), "the hook saved")
    hook_id = console.text_of("hooks-state").removeprefix("saved ")
    row = f"#hooks-rows tr[data-id='{hook_id}']"
    async with Bus(up.nats_url) as bus:
        await bus.emit("prx.lifecycle.agent_end", {}, session_id="one")
        assert (await wait_for_file(marks)).split() == ["one"]

        console.driver.find_element(By.CSS_SELECTOR, f"{row} button.toggle").click()
        console.confirm()
        console.wait(lambda: "off" in console.classes(row), "the hook off")
        console.shot("hooks-disabled")
        await bus.emit("prx.lifecycle.agent_end", {}, session_id="two")  # disabled: must not run
        await bus.flush()  # sent now: the browser calls below block this loop, a pending publish would go late

        console.driver.find_element(By.CSS_SELECTOR, f"{row} button.toggle").click()
        console.confirm()
        console.wait(lambda: "off" not in console.classes(row), "the hook on")
        await bus.emit("prx.lifecycle.agent_end", {}, session_id="three")
        await wait_until(lambda: len(marks.read_text().split()) >= 2, what="the hook's second run")
    assert marks.read_text().split() == ["one", "three"], "the run while disabled never happened"
    console.find("tab-hooks").click()  # reload: the runs and metrics of the hook
    console.wait(lambda: hook_id in console.text_of("hook-metrics"), "the hook's metrics")
    console.wait(lambda: "disabled by console" in console.text_of("hook-runs"), "the console's toggle in the last runs")
    console.shot("hooks")


def test_the_status_page_lists_what_hookbus_status_lists(console: Console) -> None:
    console.login()
    console.tab("status")
    console.wait(lambda: "shell hooks" in console.text_of("status-body"), "the status listing")
    first = console.find("status-body").get_attribute("data-updated")
    console.wait(lambda: console.find("status-body").get_attribute("data-updated") != first, "a live refresh")
    for heading in ("buses (hookbus up)", "agents", "workers", "trigger engines", "journal sinks", "modules"):
        assert heading in console.text_of("status-body")
    console.shot("status")
    assert os.listdir(console.shots), "screenshots were saved"
