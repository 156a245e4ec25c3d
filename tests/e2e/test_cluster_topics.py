"""A chat's topic is the cluster's, not a worker's: `/new work` answered by one worker, the
next messages answered by another (which was running all along) land in the `work` session."""

from __future__ import annotations

import signal
from pathlib import Path

import asyncpg
import pytest

from bus import SessionKey
from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 5150
CHAT = 7101


def _answered_new(worker: DaemonProcess) -> bool:
    return any(
        event.get("event") == "cluster.command_answered" and event.get("command") == "/new"
        for event in worker.logs
    )


async def _messages_by_session(dsn: str, profile: str) -> dict[str, int]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT session_key, message_count FROM octos_sessions"
            " WHERE scope = $1 AND archived_at IS NULL",
            profile,
        )
    finally:
        await connection.close()
    return {row["session_key"]: row["message_count"] for row in rows}


async def test_new_on_one_worker_holds_on_the_other(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    chat = SessionKey.for_chat(profile, "telegram", str(CHAT))
    async with FakeTelegram() as fake, processes() as running:
        config = cluster_config(
            tmp_path,
            {profile: polling_profile(fake, USER, "{type: echo}")},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        workers = [await start_role(config, "worker"), await start_role(config, "worker")]
        running.extend(workers)
        running.append(await start_role(config, "ingress"))

        fake.push_message(CHAT, "/new work", user_id=USER)
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) == 1, timeout_s=30)
        assert fake.bot_messages(CHAT)[0]["text"].startswith("New session 'work'")
        (switched,) = [worker for worker in workers if _answered_new(worker)]
        (other,) = [worker for worker in workers if worker is not switched]
        # The worker that ran `/new` leaves: the other one, which started before the switch,
        # answers everything from now on.
        switched.signal(signal.SIGTERM)
        assert await switched.wait() == 0, switched.logs[-10:]

        texts = [f"in work {n}" for n in range(3)]
        for n, text in enumerate(texts, start=2):
            fake.push_message(CHAT, text, user_id=USER)

            def answered(count: int = n) -> bool:
                return len(fake.bot_messages(CHAT)) == count

            await fake.wait_until(answered, timeout_s=30)
        fake.push_message(CHAT, "/sessions", user_id=USER)
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) == 5, timeout_s=30)
        replies = [message["text"] for message in fake.bot_messages(CHAT)]
        assert replies[1:4] == texts  # the echo agent
        # Telegram's formatting shows the active mark as a bullet; only `work` is listed.
        assert replies[4].splitlines()[-1].endswith(" work (6 messages)"), replies[4]
        assert "default" not in replies[4]
        assert sum(1 for e in other.logs if e.get("event") == "turn.started") == 3

    stored = await _messages_by_session(postgres_dsn, profile)
    assert stored == {str(chat.with_topic("work")): 6}
