"""The web chat page in a real headless Chromium, against the real daemon subprocess."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import BrowserContext, Page, expect

from tests.support import browser as browser_support
from tests.support.browser import chromium_context, require_chromium
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

TOKEN = "page-token-for-tests"
#: Set it to a file path to keep a screenshot of the page after a streamed reply.
SCREENSHOT_ENV = "OCTOS_WEB_SCREENSHOT"

# Runs before the page's own script: remembers every text the newest assistant bubble showed,
# so a test can tell that the reply grew in place rather than appeared at once.
RECORD_ASSISTANT_TEXTS = """
window.assistantTexts = [];
new MutationObserver(() => {
  const bubbles = document.querySelectorAll("#log .message.assistant");
  const newest = bubbles[bubbles.length - 1];
  const texts = window.assistantTexts;
  if (newest && texts[texts.length - 1] !== newest.textContent) texts.push(newest.textContent);
}).observe(document, { childList: true, subtree: true, characterData: true });
"""

NEWEST_REPLY_SETTLED = """
(text) => {
  const bubbles = document.querySelectorAll("#log .message.assistant");
  const newest = bubbles[bubbles.length - 1];
  return !!newest && !newest.classList.contains("streaming") && newest.textContent === text;
}
"""

BUBBLES = """
() => Array.from(document.querySelectorAll("#log .message"), (element) => [
  element.classList.contains("user") ? "user" : "assistant",
  element.textContent,
])
"""


def slow_echo_profile(port: int, *, token: str | None = None) -> str:
    auth = f"\n    auth_token: {token}" if token else ""
    return f"""\
agent: {{type: echo, delay_s: 0.3, pieces: 4}}
channels:
  - type: api
    port: {port}{auth}
"""


@dataclass
class WebChat:
    daemon: DaemonProcess
    url: str


async def start_web_chat(tmp_path: Path, *, token: str | None = None) -> WebChat:
    port = free_port()
    config = write_config(tmp_path, {"web": slow_echo_profile(port, token=token)})
    daemon = await DaemonProcess(config).start()
    await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")
    return WebChat(daemon, f"http://127.0.0.1:{port}/")


@pytest.fixture
async def browser() -> AsyncIterator[BrowserContext]:
    executable = require_chromium()
    async with chromium_context(executable) as context:
        await context.add_init_script(RECORD_ASSISTANT_TEXTS)
        yield context


#: A phone's screen, in CSS pixels (an iPhone 12 to 15).
PHONE_WIDTH, PHONE_HEIGHT = 390, 844


@pytest.fixture
async def phone() -> AsyncIterator[BrowserContext]:
    async with chromium_context(
        require_chromium(), width=PHONE_WIDTH, height=PHONE_HEIGHT
    ) as context:
        yield context


class ChatPage:
    """The page as a user sees it: a log of bubbles, a composer, an error line."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.input = page.locator("#input")
        self.error = page.locator("#error")

    async def history_shown(self) -> None:
        await self.page.locator('#log[aria-busy="false"]').wait_for()

    async def type_and_enter(self, text: str) -> None:
        await self.input.fill(text)
        await self.input.press("Enter")

    async def reply_settled(self, text: str) -> None:
        await self.page.wait_for_function(NEWEST_REPLY_SETTLED, arg=text)

    async def bubbles(self) -> list[tuple[str, str]]:
        pairs: list[list[str]] = await self.page.evaluate(BUBBLES)
        return [(role, text) for role, text in pairs]

    async def assistant_texts(self) -> list[str]:
        texts: list[str] = await self.page.evaluate("() => window.assistantTexts")
        return texts


async def open_chat(browser: BrowserContext, url: str) -> ChatPage:
    page = await browser.new_page()
    await page.goto(url)
    return ChatPage(page)


async def test_reply_grows_in_place_and_history_survives_a_reload(
    tmp_path: Path, browser: BrowserContext
) -> None:
    chat = await start_web_chat(tmp_path)
    text = "the quick brown fox jumps over the lazy dog"
    try:
        page = await open_chat(browser, chat.url)
        await page.history_shown()
        assert await page.bubbles() == []

        # Enter that confirms an input method's candidate (Chinese, Japanese...) does not send.
        await page.input.fill("你好")
        await page.input.dispatch_event("keydown", {"key": "Enter", "isComposing": True})
        assert await page.bubbles() == []
        await expect(page.input).to_have_value("你好")

        await page.type_and_enter(text)
        await page.reply_settled(text)

        grown = await page.assistant_texts()
        assert grown[-1] == text
        assert all(text.startswith(snapshot) for snapshot in grown)
        assert any(0 < len(snapshot) < len(text) for snapshot in grown), grown
        assert await page.bubbles() == [("user", text), ("assistant", text)]
        await expect(page.error).to_be_hidden()
        await expect(page.input).to_have_value("")
        if screenshot := os.environ.get(SCREENSHOT_ENV):
            await page.page.screenshot(path=screenshot)

        await page.page.reload()
        await page.history_shown()
        assert await page.bubbles() == [("user", text), ("assistant", text)]
        await expect(page.error).to_be_hidden()
    finally:
        await chat.daemon.stop()


async def test_the_page_asks_for_the_token_and_then_chats(
    tmp_path: Path, browser: BrowserContext
) -> None:
    chat = await start_web_chat(tmp_path, token=TOKEN)
    try:
        page = await open_chat(browser, chat.url)
        dialog = page.page.locator("#token-dialog")
        await expect(dialog).to_be_visible()
        await page.page.locator("#token-input").fill(TOKEN)
        await page.page.locator("#token-form button").click()
        await expect(dialog).to_be_hidden()
        await page.history_shown()
        await expect(page.error).to_be_hidden()

        await page.type_and_enter("let me in")
        await page.reply_settled("let me in")
        await expect(page.error).to_be_hidden()

        # The token is remembered: a reload goes straight to the history.
        await page.page.reload()
        await page.history_shown()
        await expect(dialog).to_be_hidden()
        assert await page.bubbles() == [("user", "let me in"), ("assistant", "let me in")]
    finally:
        await chat.daemon.stop()


async def test_a_failed_send_shows_the_error(tmp_path: Path, browser: BrowserContext) -> None:
    chat = await start_web_chat(tmp_path)
    try:
        page = await open_chat(browser, chat.url)
        await page.history_shown()
        chat.daemon.signal(signal.SIGTERM)
        assert await chat.daemon.wait() == 0

        await page.type_and_enter("is anyone there?")
        await expect(page.error).to_be_visible()
        await expect(page.error).to_contain_text("Sending failed")
        failed = page.page.locator("#log .message.assistant.failed")
        await expect(failed).to_have_count(1)
        await expect(page.page.locator("#send")).to_be_enabled()
    finally:
        await chat.daemon.stop()


# Where an element is on screen, and whether it is the one a tap at its centre reaches.
ON_SCREEN = """
(element) => {
  const box = element.getBoundingClientRect();
  const centre = document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2);
  return {
    left: box.left, right: box.right, top: box.top, bottom: box.bottom,
    tappable: centre !== null && element.contains(centre),
  };
}
"""


async def assert_fits_the_screen(page: Page, *selectors: str) -> None:
    width: list[int] = await page.evaluate(
        "() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]"
    )
    assert width[0] <= width[1], f"the page scrolls sideways: {width[0]} px in {width[1]} px"
    for selector in selectors:
        place = await page.locator(selector).evaluate(ON_SCREEN)
        assert place["left"] >= 0, (selector, place)
        assert place["right"] <= PHONE_WIDTH, (selector, place)
        assert place["top"] >= 0, (selector, place)
        assert place["bottom"] <= PHONE_HEIGHT, (selector, place)
        assert place["tappable"], (selector, place)


async def test_the_page_fits_a_phone_screen(tmp_path: Path, phone: BrowserContext) -> None:
    chat = await start_web_chat(tmp_path)
    # A long word (a link) and a long code line are what push a narrow page wider.
    text = "see https://example.org/" + "x" * 120
    try:
        page = await open_chat(phone, chat.url)
        await page.history_shown()
        await page.type_and_enter(text)
        await page.reply_settled(text)
        await page.type_and_enter("```\n" + "code " * 60 + "\n```")
        await expect(page.page.locator("#log .message.assistant pre")).to_have_count(1)
        await assert_fits_the_screen(
            page.page, "#chat-label", "#topics", "#new-topic", "#new-chat", "#input", "#send"
        )
    finally:
        await chat.daemon.stop()


async def test_a_refused_token_is_said_and_the_right_one_shows_the_history(
    tmp_path: Path, phone: BrowserContext
) -> None:
    chat = await start_web_chat(tmp_path, token=TOKEN)
    try:
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            http.post(
                chat.url + "v1/chat", json={"chat_id": "web-phone", "content": "said before"}
            ) as said,
        ):
            assert said.status == 200, await said.text()
        await phone.add_init_script(
            'if (location.protocol === "http:" && !localStorage.getItem("octos.chat_id"))'
            ' localStorage.setItem("octos.chat_id", "web-phone");'
        )
        page = await open_chat(phone, chat.url)
        dialog = page.page.locator("#token-dialog")
        refused = page.page.locator("#token-refused")
        token_input = page.page.locator("#token-input")
        save = page.page.locator("#token-form button")
        history = page.page.locator("#log .message")
        await expect(dialog).to_be_visible()
        await expect(refused).to_be_hidden()

        await token_input.fill("not-the-token")
        await save.click()
        await expect(refused).to_be_visible()
        await expect(refused).to_contain_text("refused")
        await expect(dialog).to_be_visible()
        await assert_fits_the_screen(page.page, "#token-input", "#token-form button")

        await token_input.fill(TOKEN)
        await save.click()
        await expect(dialog).to_be_hidden()
        await expect(history).to_have_text(["said before", "said before"])
        await page.history_shown()
        await expect(page.error).to_be_hidden()

        # A token stored earlier and since changed on the server is refused the same way.
        await page.page.evaluate('() => localStorage.setItem("octos.token", "an-old-token")')
        await page.page.reload()
        await expect(refused).to_be_visible()
        await token_input.fill(TOKEN)
        await save.click()
        await expect(history).to_have_text(["said before", "said before"])
        await expect(page.error).to_be_hidden()
    finally:
        await chat.daemon.stop()


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_a_missing_browser_fails_in_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setattr(browser_support, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="apt-get install chromium"):
        require_chromium()
