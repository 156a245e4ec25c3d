"""The status page on the health server, in headless Chromium against the daemon subprocess."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import BrowserContext, Page, expect

from bus import OutboundMessage, new_turn_id
from channels.errors import DeliveryError
from gateway.daemon.reply_dead_letters import DeadLetterStore, ReplyDeadLetter
from tests.fakes.telegram_server import FakeTelegram
from tests.support.browser import chromium_context, require_chromium
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

STATUS_TOKEN = "status-token-for-tests"
WRONG_TELEGRAM_TOKEN = "987654321:WRONG-token_abcdefghijklmnopqrstuvw"


def write_gateway(
    directory: Path, *, http_host: str, api_port: int, fake: FakeTelegram, token: str | None
) -> Path:
    (directory / "profiles").mkdir(parents=True, exist_ok=True)
    (directory / "profiles" / "main.yaml").write_text(
        textwrap.dedent(
            f"""\
            agent: {{type: echo}}
            channels:
              - type: api
                port: {api_port}
              - type: telegram
                token: "{WRONG_TELEGRAM_TOKEN}"
                base_url: {fake.base_url}
                allow: ["*"]
            """
        )
    )
    token_line = f", token: {token}" if token else ""
    config = directory / "gateway.yaml"
    config.write_text(
        "data_dir: data\nprofiles_dir: profiles\n"
        f"http: {{host: {http_host}, port: {free_port()}{token_line}}}\n"
        "logging: {level: debug, format: json}\n"
    )
    return config


@asynccontextmanager
async def running_gateway(
    directory: Path, *, http_host: str, api_port: int, token: str | None
) -> AsyncIterator[DaemonProcess]:
    """The daemon of `write_gateway`'s files, its Telegram channel on a fake; stopped after."""
    async with FakeTelegram() as fake:
        config = write_gateway(
            directory, http_host=http_host, api_port=api_port, fake=fake, token=token
        )
        daemon = await DaemonProcess(config).start()
        try:
            yield daemon
        finally:
            await daemon.stop()


@pytest.fixture
async def browser() -> AsyncIterator[BrowserContext]:
    executable = require_chromium()
    async with chromium_context(executable) as context:
        yield context


async def chat(api_port: int, text: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{api_port}/v1/chat", json={"chat_id": "web-1", "content": text}
        ) as response,
    ):
        assert response.status == 200, await response.text()


def status_url(daemon: DaemonProcess) -> str:
    port = daemon.http_url.rsplit(":", 1)[1]
    return f"http://127.0.0.1:{port}/"


async def test_the_page_shows_health_last_error_counts_and_failures_and_refreshes(
    tmp_path: Path, browser: BrowserContext
) -> None:
    api_port = free_port()
    async with running_gateway(
        tmp_path, http_host="127.0.0.1", api_port=api_port, token=None
    ) as daemon:
        await daemon.wait_log(lambda e: e.get("event") == "api.web_chat_ready")
        await daemon.wait_log(lambda e: e.get("event") == "channel.down")
        await chat(api_port, "first")
        page: Page = await browser.new_page()
        await page.goto(status_url(daemon))
        profile = page.locator("[data-profile=main]")
        await expect(profile.locator("h2")).to_contain_text("agent echo")
        telegram = profile.locator("[data-channel=telegram]")
        await expect(telegram.locator(".status")).to_have_text("down")
        await expect(telegram).to_contain_text("rejected the bot token")
        await expect(telegram.locator("[data-waiting]")).to_have_text("0")
        await expect(profile.locator("[data-channel=api] .status")).to_have_text("healthy")
        await expect(profile.locator("[data-figure=turns]")).to_contain_text("1 ok")
        await expect(profile.locator("[data-figure=sessions]")).to_contain_text("1")
        await expect(page.locator("#failures")).to_contain_text("channel.down")
        assert WRONG_TELEGRAM_TOKEN not in await page.content()
        # It refreshes itself: a second turn shows up without a reload.
        await chat(api_port, "second")
        await expect(profile.locator("[data-figure=turns]")).to_contain_text("2 ok")
        # The favicon is served, and the page is read-only.
        async with aiohttp.ClientSession() as http:
            async with http.get(status_url(daemon) + "favicon.svg") as response:
                assert response.status == 200
                assert response.content_type == "image/svg+xml"
            async with http.post(status_url(daemon) + "status.json") as response:
                assert response.status in (404, 405)


async def test_beyond_loopback_the_page_needs_the_token(
    tmp_path: Path, browser: BrowserContext
) -> None:
    async with running_gateway(
        tmp_path, http_host="0.0.0.0", api_port=free_port(), token=STATUS_TOKEN
    ) as daemon:
        url = status_url(daemon)
        async with aiohttp.ClientSession() as http, http.get(url + "status.json") as response:
            assert response.status == 401
        page = await browser.new_page()
        await page.goto(url)
        await expect(page.locator("#token-form")).to_be_visible()
        await page.fill("#token-input", "not-it")
        await page.click("#token-form button")
        await expect(page.locator("#error")).to_have_text("That token was refused.")
        await page.fill("#token-input", STATUS_TOKEN)
        await page.click("#token-form button")
        await expect(page.locator("[data-profile=main] h2")).to_contain_text("agent echo")
        await expect(page.locator("#token-form")).to_be_hidden()


async def test_beyond_loopback_without_a_token_the_data_stays_closed(tmp_path: Path) -> None:
    async with running_gateway(
        tmp_path, http_host="0.0.0.0", api_port=free_port(), token=None
    ) as daemon:
        url = status_url(daemon)
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "status.json") as response:
                assert response.status == 403
                assert "http.token" in (await response.json())["suggestion"]
            async with http.get(url + "healthz") as response:
                assert response.status == 200


async def test_both_pages_serve_the_one_icon(tmp_path: Path) -> None:
    # One file is the project's icon (the web chat page's): the status page serves it too.
    api_port = free_port()
    async with running_gateway(
        tmp_path, http_host="127.0.0.1", api_port=api_port, token=None
    ) as daemon:
        await daemon.wait_log(lambda e: e.get("event") == "api.web_chat_ready")
        icons = []
        async with aiohttp.ClientSession() as http:
            for url in (
                status_url(daemon) + "favicon.svg",
                f"http://127.0.0.1:{api_port}/static/favicon.svg",
                f"http://127.0.0.1:{api_port}/favicon.ico",
            ):
                async with http.get(url) as response:
                    assert response.status == 200, url
                    assert response.content_type == "image/svg+xml", url
                    icons.append(await response.read())
        assert icons[0].startswith(b"<svg")
        assert icons == [icons[0]] * 3


async def test_a_failed_profile_shows_why_it_is_not_running(
    tmp_path: Path, browser: BrowserContext
) -> None:
    api_only = "agent: {type: echo}\nchannels: [{type: api, port: 0}]\n"
    config = write_config(tmp_path, {"main": api_only, "broken": api_only})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "broken").write_text("a file where the profile's directory belongs\n")
    daemon = await DaemonProcess(config).start()
    try:
        await daemon.wait_log(lambda e: e.get("event") == "gateway.started")
        page = await browser.new_page()
        await page.goto(status_url(daemon))
        failure = page.locator("[data-profile=broken] [data-failure]")
        await expect(failure).to_contain_text("not running: cannot use the data directory")
        await expect(page.locator("[data-profile=main] [data-failure]")).to_have_count(0)
    finally:
        await daemon.stop()


async def test_the_page_shows_a_profiles_dead_letters_with_their_reason(
    tmp_path: Path, browser: BrowserContext
) -> None:
    api_only = "agent: {type: echo}\nchannels: [{type: api, port: 0}]\n"
    config = write_config(tmp_path, {"main": api_only})
    refused = OutboundMessage(
        channel="telegram", chat_id="42", content="hello", delivery_id=str(new_turn_id())
    )
    error = DeliveryError("Forbidden: bot was blocked by the user", reason="auth")
    DeadLetterStore(tmp_path / "data" / "main").add(ReplyDeadLetter.of("main", refused, error))
    daemon = await DaemonProcess(config).start()
    try:
        await daemon.wait_log(lambda e: e.get("event") == "gateway.started")
        page = await browser.new_page()
        await page.goto(status_url(daemon))
        profile = page.locator("[data-profile=main]")
        await expect(profile.locator("[data-figure=dead_letters]")).to_contain_text("1 dead letter")
        letter = profile.locator(f"[data-dead-letter='{refused.delivery_id}']")
        await expect(letter).to_contain_text("auth")
        await expect(letter).to_contain_text("telegram:42")
        await expect(letter).to_contain_text("bot was blocked")
    finally:
        await daemon.stop()
