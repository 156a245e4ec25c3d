"""A worker SIGKILLed between a command's effect and its stored reply: the redelivery, on
another worker, runs the command once (`/back` lands on the default session, not back on
`work`).

To kill it in exactly that window, the test sets a trap in PostgreSQL: a trigger makes the
statement storing the `/back`'s reply wait for an advisory lock the test holds. The worker logs
`cluster.command_answered` once the command has run (its effect made, in its transaction), and
cannot commit before the test lets go of the lock, which it does only after the kill."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from tests.e2e.cluster_daemons import echo_on_telegram, processes, start_role
from tests.fakes.telegram_server import FakeTelegram
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 5252
CHAT = 7202
TRAP_LOCK = 0x7472_6170  # "trap"


@asynccontextmanager
async def reply_storing_blocked(dsn: str, profile: str, reply_text: str) -> AsyncIterator[None]:
    """While inside: storing a reply of `profile` containing `reply_text` waits on a lock this
    holds. On the way out the lock is let go and the trap removed (once the trapped
    transaction has ended)."""
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute("SELECT pg_advisory_lock($1)", TRAP_LOCK)
        await connection.execute(
            f"""
            CREATE FUNCTION octos_trap_{profile}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.scope = '{profile}' AND NEW.reply::text LIKE '%{reply_text}%' THEN
                    PERFORM pg_advisory_xact_lock({TRAP_LOCK});
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER octos_trap_{profile} BEFORE UPDATE ON octos_cluster_turns
                FOR EACH ROW EXECUTE FUNCTION octos_trap_{profile}();
            """
        )
        try:
            yield
        finally:
            await connection.execute("SELECT pg_advisory_unlock($1)", TRAP_LOCK)
            await connection.execute(
                f"DROP TRIGGER octos_trap_{profile} ON octos_cluster_turns;"
                f"DROP FUNCTION octos_trap_{profile}();",
                timeout=30,
            )
    finally:
        await connection.close()


async def chat_topics(dsn: str, profile: str) -> tuple[str | None, str | None]:
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow(
            "SELECT active, previous FROM octos_active_topics WHERE scope = $1", profile
        )
    finally:
        await connection.close()
    assert row is not None
    return row["active"], row["previous"]


async def test_a_back_cut_off_by_sigkill_before_its_reply_switches_back_once(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    async with FakeTelegram() as fake, processes() as running:
        # A short ack_wait: the message comes back soon after its worker was killed.
        settings = {"prefix": nats_prefix, "dsn": postgres_dsn, "ack_wait_s": 3}
        config = echo_on_telegram(tmp_path, fake, profile, USER, **settings)
        killed = await start_role(config, "worker")
        running.extend([killed, await start_role(config, "ingress")])
        fake.push_message(CHAT, "/new work", user_id=USER)
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) == 1, timeout_s=30)

        async with reply_storing_blocked(postgres_dsn, profile, "Back to"):
            fake.push_message(CHAT, "/back", user_id=USER)
            await killed.wait_log(
                lambda event: (
                    event.get("event") == "cluster.command_answered"
                    and event.get("command") == "/back"
                )
            )
            killed.signal(signal.SIGKILL)
            assert await killed.wait() == -signal.SIGKILL
        running.append(await start_role(config, "worker"))
        await fake.wait_until(lambda: len(fake.bot_messages(CHAT)) == 2, timeout_s=30)
        replies = [message["text"] for message in fake.bot_messages(CHAT)]
        assert replies[0].startswith("New session 'work'")
        assert replies[1] == "Back to 'default'."
    # Once: the default session active, `work` the one before (twice: back on `work`).
    assert await chat_topics(postgres_dsn, profile) == (None, "work")
