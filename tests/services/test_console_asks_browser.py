"""The console's Asks page in a real browser (Debian's chromium) against a real `hookbus up`: held calls are
shown exactly, live, and answered from the page (an edit with its diff, a deny with its reason); the held
intercepts return those answers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from bus import Bus, Cancel, Patch
from bus._middleware.asks.store import AskStore
from tests.cli.test_cli import UpProcess
from tests.services.test_asks_http import Held
from tests.services.test_console_browser import Console, browser, shots  # noqa: F401  (fixtures)
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    process = UpProcess(tmp_path_factory.mktemp("console-asks"))
    yield process
    process.close()


async def ask_id(store: AskStore, session: str) -> str:
    found: list[str] = []

    async def one() -> bool:
        found[:] = [item.ask.id for item in await store.pending() if item.ask.session == session]
        return bool(found)

    await wait_until(one, what=f"the ask of {session}")
    return found[0]


def answer_in_page(console: Console, edit_id: str, deny_id: str) -> None:
    """Edit the first ask (checking the diff), deny the second with a reason: as an operator would."""
    console.login()
    console.tab("asks")
    box = console.wait(lambda: console.first(f'.ask[data-id="{edit_id}"]'), "the ask to edit")
    assert "git push --force" in box.find_element(By.CSS_SELECTOR, ".ask-payload").text
    assert "a person decides over HTTP" in box.text
    console.wait(lambda: " left" in box.find_element(By.CSS_SELECTOR, ".ask-left").text, "the time left")
    console.wait(lambda: console.first(f'.ask[data-id="{deny_id}"]'), "the ask to deny")
    console.shot("asks")
    box.find_element(By.CSS_SELECTOR, "button.edit-open").click()
    text = box.find_element(By.CSS_SELECTOR, "textarea.ask-edit")
    text.clear()
    text.send_keys('{"name": "shell", "input": {"command": "git push"}}')
    diff = box.find_element(By.CSS_SELECTOR, ".ask-diff")
    console.wait(lambda: '+     "command": "git push"' in diff.text, "the edit's diff")
    assert '-     "command": "git push --force"' in diff.text
    console.shot("asks-edit")
    box.find_element(By.CSS_SELECTOR, "button.edit-send").click()
    console.confirm()
    console.wait(lambda: "done by console" in console.text_of("asks-state"), "the edit answered")
    console.wait(lambda: console.first(f'.ask[data-id="{edit_id}"]') is None, "the answered ask gone")
    denied = console.first(f'.ask[data-id="{deny_id}"]')
    denied.find_element(By.CSS_SELECTOR, "button.deny").click()  # no reason: refused on the page
    console.wait(lambda: "give a reason" in console.text_of("asks-state"), "a deny without reason refused")
    denied.find_element(By.CSS_SELECTOR, "input.ask-deny-reason").send_keys("not from the browser")
    denied.find_element(By.CSS_SELECTOR, "button.deny").click()
    console.confirm()
    console.wait(lambda: console.first(f'.ask[data-id="{deny_id}"]') is None, "the denied ask gone")


async def test_asks_are_answered_from_the_page(up: UpProcess, browser: WebDriver, shots: Path) -> None:  # noqa: F811
    console = Console(up, browser, shots)
    async with AsyncExitStack() as stack:
        kernel = await stack.enter_async_context(Bus(up.nats_url, name="asks-browser", trust_new=True))
        held = Held(up, kernel, stack)
        payload = {"name": "shell", "input": {"command": "git push --force"}}
        edited, edited_session = await held.call(payload)
        denied, denied_session = await held.call({"n": 1})
        store = AskStore(kernel.port)
        edit_id, deny_id = await ask_id(store, edited_session), await ask_id(store, denied_session)
        await asyncio.to_thread(answer_in_page, console, edit_id, deny_id)
        edit = {"name": "shell", "input": {"command": "git push"}}
        assert await asyncio.wait_for(edited, 30) == Patch({**edit, "after_saw": edit})
        decision = await asyncio.wait_for(denied, 30)
    assert isinstance(decision, Cancel) and decision.reason == "denied by console: not from the browser"
