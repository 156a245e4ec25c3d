"""The web chat page's first-hour fixes in headless Chromium against the daemon subprocess:
a non-secure origin, a chat id the allow list refuses, safe Markdown, Stop, who answers, the
favicon, the chat's topics, a reply's buttons."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import BrowserContext, Dialog, Page, expect

from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.browser import chromium_context, require_chromium
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

NEWEST_ASSISTANT = "#log .message.assistant >> nth=-1"


def non_loopback_address() -> str | None:
    """This machine's address on its network (what a user types to reach a server by IP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))  # no packet is sent for a UDP connect
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


async def start(
    tmp_path: Path, *, host: str = "127.0.0.1", slow: bool = False, allow: str = '["*"]'
) -> DaemonProcess:
    port = free_port()
    agent = "{type: echo, delay_s: 0.4, pieces: 30}" if slow else "{type: echo}"
    profile = (
        f"agent: {agent}\nchannels:\n  - type: api\n    host: {host}\n    port: {port}\n"
        f"    allow: {allow}\n"
    )
    daemon = await DaemonProcess(write_config(tmp_path, {"web": profile})).start()
    await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")
    daemon.http_url = f"http://{host}:{port}/"  # the chat page, for these tests
    return daemon


@pytest.fixture
async def browser() -> AsyncIterator[BrowserContext]:
    async with chromium_context(require_chromium()) as context:
        yield context


async def opened(browser: BrowserContext, url: str) -> Page:
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(url)
    await page.locator('#log[aria-busy="false"]').wait_for()
    assert errors == [], errors
    return page


async def say(page: Page, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


async def test_a_page_served_by_ip_over_http_works(tmp_path: Path, browser: BrowserContext) -> None:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    daemon = await start(tmp_path, host="0.0.0.0")
    try:
        port = daemon.http_url.rsplit(":", 1)[1].rstrip("/")
        page = await opened(browser, f"http://{address}:{port}/")
        assert await page.evaluate("() => window.isSecureContext") is False
        assert await page.evaluate("() => typeof crypto.randomUUID") == "undefined"
        await expect(page.locator("#chat-label")).to_have_text(
            __import__("re").compile(r"^chat web-[0-9a-f]{8}$")
        )
        await say(page, "hello over plain http")
        await expect(page.locator(NEWEST_ASSISTANT)).to_have_text("hello over plain http")
        await expect(page.locator("#error")).to_be_hidden()
    finally:
        await daemon.stop()


async def test_a_refused_chat_id_is_shown_the_notice(
    tmp_path: Path, browser: BrowserContext
) -> None:
    daemon = await start(tmp_path, allow="[alice]")
    try:
        page = await opened(browser, daemon.http_url)
        await say(page, "hello?")
        # What the gateway tells a stranger, as a note in the log, not as a failure to send.
        note = page.locator("#log .message.note.refused")
        await expect(note).to_contain_text("this bot does not know you yet. Your id is web-")
        await expect(page.locator("#log .message.assistant")).to_have_count(0)
        await expect(page.locator("#error")).to_be_hidden()
        await expect(page.locator("#send")).to_be_enabled()
    finally:
        await daemon.stop()


async def test_markdown_is_rendered_and_html_is_not(
    tmp_path: Path, browser: BrowserContext
) -> None:
    daemon = await start(tmp_path)
    try:
        page = await opened(browser, daemon.http_url)
        await expect(page.locator("#empty")).to_contain_text("answered by the echo agent")
        markdown = (
            "**bold** and `code`\n\n- one\n- two\n\n```\nfenced <b>block</b>\n```\n\n"
            '<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> '
            "[bad](javascript:window.pwned=3) [good](https://example.org/)"
        )
        await say(page, markdown)
        reply = page.locator(NEWEST_ASSISTANT)
        await expect(reply.locator("strong")).to_have_text("bold")
        await expect(reply.locator("li")).to_have_count(2)
        await expect(reply.locator("pre code")).to_have_text("fenced <b>block</b>\n")
        await expect(reply.locator('a[href="https://example.org/"]')).to_have_attribute(
            "target", "_blank"
        )
        assert await reply.locator("img, script, b").count() == 0
        assert await reply.locator('a[href^="javascript"]').count() == 0
        await expect(reply).to_contain_text('<img src=x onerror="window.pwned=1">')
        assert await page.evaluate("() => window.pwned") is None
        # The user's own bubble shows exactly what they typed.
        user = page.locator("#log .message.user >> nth=-1")
        await expect(user).to_have_text(markdown)
        await expect(page.locator("#empty")).to_be_hidden()
        # The favicon the page links to is served.
        href = await page.locator('link[rel="icon"]').get_attribute("href")
        async with (
            aiohttp.ClientSession() as http,
            http.get(daemon.http_url.rstrip("/") + str(href)) as icon,
        ):
            assert icon.status == 200
            assert icon.content_type == "image/svg+xml"
    finally:
        await daemon.stop()


async def test_stop_cancels_the_running_reply(tmp_path: Path, browser: BrowserContext) -> None:
    daemon = await start(tmp_path, slow=True)
    try:
        page = await opened(browser, daemon.http_url)
        words = " ".join(f"word{n}" for n in range(60))
        await say(page, words)
        stop = page.locator("#stop")
        await expect(stop).to_be_visible()
        await expect(page.locator(NEWEST_ASSISTANT)).to_contain_text("word0")
        await stop.click()
        await expect(page.locator("#log .message.note")).to_contain_text("Cancelled")
        await expect(stop).to_be_hidden()
        await expect(page.locator("#send")).to_be_enabled()
        stopped = page.locator("#log .message.assistant.stopped")
        await expect(stopped).to_have_count(1)
        shown = await stopped.text_content()
        assert shown is not None
        assert shown.startswith("word0")
        assert "word59" not in shown
        await expect(page.locator("#error")).to_be_hidden()
    finally:
        await daemon.stop()


async def test_topics_are_listed_created_and_switched(
    tmp_path: Path, browser: BrowserContext
) -> None:
    daemon = await start(tmp_path)
    try:
        page = await opened(browser, daemon.http_url)
        await say(page, "in the default topic")
        await expect(page.locator(NEWEST_ASSISTANT)).to_have_text("in the default topic")

        async def name_it(dialog: Dialog) -> None:
            await dialog.accept("work")

        page.once("dialog", name_it)
        await page.click("#new-topic")
        await expect(page.locator("#log .message.note")).to_contain_text("New session 'work'")
        await expect(page.locator("#topics")).to_have_value("work")
        await say(page, "about work")
        await expect(page.locator(NEWEST_ASSISTANT)).to_have_text("about work")

        await page.select_option("#topics", "default")
        await page.locator('#log[aria-busy="false"]').wait_for()
        await expect(page.locator("#log .message.user")).to_have_text(["in the default topic"])
        await expect(page.locator("#topics option")).to_have_text(["default", "work"])

        await page.select_option("#topics", "work")
        await expect(page.locator("#log .message.user >> nth=-1")).to_have_text("about work")
    finally:
        await daemon.stop()


async def test_a_replys_buttons_show_and_a_tap_reaches_the_agent_once(
    tmp_path: Path, browser: BrowserContext
) -> None:
    async with FakeWebhook() as webhook:
        port = free_port()
        profile = (
            f'agent: {{type: webhook, url: "{webhook.url}"}}\n'
            f"channels:\n  - type: api\n    host: 127.0.0.1\n    port: {port}\n"
        )
        daemon = await DaemonProcess(write_config(tmp_path, {"web": profile})).start()
        try:
            await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")
            page = await opened(browser, f"http://127.0.0.1:{port}/")
            buttons = [
                [
                    {"text": "Approve", "data": "refund:42:yes"},
                    {"text": "Deny", "data": "refund:42:no"},
                ],
                [{"text": "Policy", "url": "https://example.com/refunds"}],
            ]
            # Streamed: the buttons come with the final event, and the whole reply with them.
            webhook.script(ScriptedReply(mode="sse", text="Approve the refund?", buttons=buttons))
            await say(page, "refund please")
            await expect(page.locator(NEWEST_ASSISTANT)).to_have_text("Approve the refund?")
            await expect(page.locator(".buttons button")).to_have_text(["Approve", "Deny"])
            link = page.locator(".buttons a")
            await expect(link).to_have_attribute("href", "https://example.com/refunds")

            webhook.script(ScriptedReply(text="Denied."))
            await page.locator(".buttons button", has_text="Deny").click()
            await expect(page.locator(NEWEST_ASSISTANT)).to_have_text("Denied.")
            # Used: the reply's buttons cannot be tapped again.
            for name in ("Approve", "Deny"):
                await expect(page.locator(".buttons button", has_text=name)).to_be_disabled()
            tap = webhook.requests[-1].json["message"]
            assert tap["content"] == "Deny"
            assert tap["callback"]["data"] == "refund:42:no"
            assert len(webhook.requests) == 2

            # Through the API itself: the same buttons tapped again reach no agent.
            chat_id = await page.evaluate("() => localStorage.getItem('octos.chat_id')")
            async with aiohttp.ClientSession() as client:
                response = await client.post(
                    f"http://127.0.0.1:{port}/v1/chat",
                    json={"chat_id": chat_id, "content": "Approve", "callback": tap["callback"]},
                )
                body = await response.json()
            assert "Already answered" in body["reply"]
            assert len(webhook.requests) == 2
        finally:
            await daemon.stop()
