"""Pairing end to end: a stranger on the fake Telegram gets a code, `octos-gateway pair` approves
them in the running daemon (no YAML edit, no SIGHUP), `allow remove` withdraws it again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import WAIT_S, running_daemon
from tests.e2e.telegram_profiles import telegram_profile
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import run_cli

pytestmark = [pytest.mark.slow]

OWNER, STRANGER = 4201, 6666
CODE = re.compile(r"this code: ([A-Z0-9]{4}-[A-Z0-9]{4})")


def texts(fake: FakeTelegram, chat: int) -> list[str]:
    return [str(message["text"]) for message in fake.bot_messages(chat)]


async def test_a_stranger_is_paired_by_code_then_removed(tmp_path: Path) -> None:
    async with (
        FakeTelegram() as fake,
        running_daemon(
            tmp_path, {"main": telegram_profile(fake, OWNER, pairing=True, webhook=False)}
        ) as daemon,
    ):
        await fake.wait_until(lambda: fake.long_polls_waiting > 0, timeout_s=WAIT_S)
        fake.push_message(STRANGER, "let me in", user_id=STRANGER, username="mallory")
        await fake.wait_until(lambda: len(texts(fake, STRANGER)) == 1, timeout_s=WAIT_S)
        [notice] = texts(fake, STRANGER)
        found = CODE.search(notice)
        assert found, notice
        assert f"Your id is {STRANGER}|mallory" in notice
        code = found.group(1)

        config = str(daemon.config)
        wrong = await run_cli("pair", "ZZZZ-ZZZZ", "-c", config, cwd=tmp_path)
        assert wrong.code == 1
        assert "no valid pairing code" in wrong.err

        reloads = daemon.count_logged("allow.overlay_reloaded")
        paired = await run_cli("pair", code.lower(), "-c", config, cwd=tmp_path)
        assert paired.code == 0, paired.err
        assert f"telegram sender {STRANGER} may now talk to profile main" in paired.out
        await daemon.wait_logged("allow.overlay_reloaded", more_than=reloads)

        fake.push_message(STRANGER, "hello bot", user_id=STRANGER, username="mallory")
        await fake.wait_until(lambda: texts(fake, STRANGER)[-1:] == ["hello bot"], timeout_s=WAIT_S)
        # The code worked once.
        again = await run_cli("pair", code, "-c", config, cwd=tmp_path)
        assert again.code == 1

        listed = await run_cli("allow", "list", "-c", config, cwd=tmp_path)
        assert listed.code == 0
        assert f"main\ttelegram\t{STRANGER}\tadded " in listed.out

        reloads = daemon.count_logged("allow.overlay_reloaded")
        removed = await run_cli("allow", "remove", str(STRANGER), "-c", config, cwd=tmp_path)
        assert removed.code == 0, removed.err
        assert f"removed: main telegram {STRANGER}" in removed.out
        await daemon.wait_logged("allow.overlay_reloaded", more_than=reloads)

        refused = await daemon.metric(
            "octos_messages_in_total", profile="main", channel="telegram", outcome="refused"
        )
        fake.push_message(STRANGER, "still there?", user_id=STRANGER, username="mallory")
        # The owner's message after it is answered once the stranger's was dispatched.
        fake.push_message(OWNER, "barrier", user_id=OWNER, username="owner")
        await fake.wait_until(lambda: texts(fake, OWNER) == ["barrier"], timeout_s=WAIT_S)
        after = await daemon.metric(
            "octos_messages_in_total", profile="main", channel="telegram", outcome="refused"
        )
        assert after == refused + 1
        assert texts(fake, STRANGER)[-1] == "hello bot"
        assert (await run_cli("allow", "list", "-c", config, cwd=tmp_path)).out == ""
