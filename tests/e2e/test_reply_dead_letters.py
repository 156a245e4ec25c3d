"""Replies given up on become dead letters, through the daemon and the Telegram fake: kept with
their reason, listed by `octos-gateway dead-letters`, counted on /metrics, shown on the status
page, sent again by `retry` to the running daemon, forgotten by `drop`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import running_daemon
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import CliResult, run_cli
from tests.support.daemon import DaemonProcess

pytestmark = pytest.mark.slow

USER = 4201
BLOCKED = "Forbidden: bot was blocked by the user"


def deadline_profile(fake: FakeTelegram, deadline_s: float) -> str:
    return polling_profile(fake, USER, "{type: echo}") + f"delivery_deadline_s: {deadline_s}\n"


async def dead_letters(daemon: DaemonProcess, *args: str) -> CliResult:
    config = daemon.config
    return await run_cli("dead-letters", *args, "-c", str(config), cwd=config.parent)


async def status_of(daemon: DaemonProcess) -> dict[str, Any]:
    status, body = await daemon.get("/status.json")
    assert status == 200, body
    [profile] = json.loads(body)["profiles"]
    dead: dict[str, Any] = profile["dead_letters"]
    return dead


def kept(daemon: DaemonProcess) -> dict[str, Any]:
    """The log line of the first reply kept as a dead letter."""
    [event] = [e for e in daemon.logs if e.get("event") == "dead_letters.kept"][:1]
    return event


async def test_a_reply_the_platform_refuses_for_good_is_a_dead_letter_at_once(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as fake:
        # Refused however often it is asked: the bot was blocked.
        fake.fail_next("sendMessage", 403, BLOCKED, times=1_000)
        async with running_daemon(tmp_path, {"main": deadline_profile(fake, 3_600)}) as daemon:
            fake.push_message(USER, "are you there?", user_id=USER)
            await daemon.wait_log(lambda e: e.get("event") == "dead_letters.kept")
            letter_id = kept(daemon)["id"]
            # Given up at the first refusal, not retried for the hour of its deadline.
            assert len(fake.calls("sendMessage")) <= 2  # the stream's first message, the final

            listed = await dead_letters(daemon, "list")
            assert listed.code == 0, listed.err
            [line] = listed.out.splitlines()
            assert line.startswith(f"{letter_id}\tmain:telegram:{USER}\t")
            assert "\tauth\t" in line
            assert "bot was blocked" in line
            shown = await dead_letters(daemon, "show", letter_id[:13])
            assert json.loads(shown.out)["reply"]["content"] == "are you there?"

            assert (
                await daemon.metric(
                    "octos_reply_dead_letters_total",
                    profile="main",
                    channel="telegram",
                    reason="auth",
                )
                == 1
            )
            status = await status_of(daemon)
            assert status["count"] == 1
            [newest] = status["newest"]
            assert (newest["id"], newest["reason"]) == (letter_id, "auth")

            dropped = await dead_letters(daemon, "drop", letter_id)
            assert dropped.code == 0, dropped.err
            assert (await dead_letters(daemon, "list")).out == ""
            assert (await status_of(daemon))["count"] == 0
            again = await dead_letters(daemon, "drop", letter_id)
            assert again.code == 1
            assert "no dead letter" in again.err


async def test_a_reply_past_its_deadline_is_a_dead_letter_that_retry_sends_once(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as fake:
        # Telegram answers 500 for longer than the reply's two seconds.
        fake.fail_next("sendMessage", 500, "Internal Server Error", times=1_000)
        async with running_daemon(tmp_path, {"main": deadline_profile(fake, 2)}) as daemon:
            # A command's reply: a reply like the agent's, without the stream snapshots whose
            # own tries (five, with no deadline) would only make the test slower.
            fake.push_message(USER, "/status", user_id=USER)
            await daemon.wait_log(lambda e: e.get("event") == "dead_letters.kept")
            letter = kept(daemon)
            assert letter["reason"] == "expired"
            assert fake.bot_messages(USER) == []
            [line] = (await dead_letters(daemon, "list")).out.splitlines()
            assert "\texpired\t" in line
            reply = json.loads((await dead_letters(daemon, "show", letter["id"])).out)["reply"]

            fake.recover("sendMessage")
            tried_before = len(fake.calls("sendMessage"))
            retried = await dead_letters(daemon, "retry", letter["id"])
            assert retried.code == 0, retried.err
            await daemon.wait_log(lambda e: e.get("event") == "dead_letters.sent_again")

            [shown] = fake.bot_messages(USER)
            assert shown["text"].split()[:2] == reply["content"].split()[:2]
            assert (await dead_letters(daemon, "list")).out == ""
            assert (await status_of(daemon))["count"] == 0
            # Nothing is left to ask for again; stopping sends nothing more either.
            assert (await dead_letters(daemon, "retry", letter["id"])).code == 1
            assert await daemon.stop_cleanly() == 0
        assert len(fake.calls("sendMessage")) == tried_before + 1
        assert daemon.count_logged("dead_letters.retrying") == 1
