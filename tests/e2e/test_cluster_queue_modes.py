"""Queue modes and stops in a cluster: an ingress process with the Telegram fake, worker
processes, and an agent (a webhook the test gates) whose turns never end unless let go.

A `/stop` or an abort trigger received by the ingress cancels the turn running on the worker
and is answered at once; `interrupt` cancels it for the newer message; `collect` joins the
messages sent during a turn into one next turn, answered once even when the worker running it
is SIGKILLed."""

from __future__ import annotations

import signal
from pathlib import Path

import asyncpg
import pytest
from nats.aio.client import Client

from tests.cluster.harness import Observer
from tests.e2e.cluster_daemons import (
    cluster_config,
    left_in,
    processes,
    start_role,
    telegram_profile,
)
from tests.fakes.gated_webhook import GatedWebhook
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess
from tests.support.nats import nats_client, nats_prefix
from tests.support.postgres import fresh_scope, postgres_dsn

__all__ = ["nats_client", "nats_prefix", "postgres_dsn"]  # the fixtures

pytestmark = pytest.mark.slow

USER = 5150
CHAT = 7301
COLLECTED = "a\n---\nQueued #2: b\n---\nQueued #3: c"
#: The echo of it as Telegram shows it (a Markdown rule becomes a blank line).
COLLECTED_SHOWN = "a\n\nQueued #2: b\n\nQueued #3: c"


def profile_of(fake: FakeTelegram, hook: GatedWebhook, mode: str) -> str:
    agent = f"{{type: webhook, url: {hook.url}}}"
    return telegram_profile(fake, USER, agent) + f"queue_mode: {mode}\n"


def texts(fake: FakeTelegram) -> list[str]:
    return [message["text"] for message in fake.bot_messages(CHAT)]


def logged(daemon: DaemonProcess, event: str) -> list[dict[str, object]]:
    return [e for e in daemon.logs if e.get("event") == event]


async def follow_inbound(client: Client, prefix: str) -> Observer:
    """What the ingress publishes to the inbound stream, seen as it is stored."""
    observer = Observer()
    await client.subscribe(f"{prefix}.in.>", cb=observer.on_message)
    return observer


async def stop_all(running: list[DaemonProcess]) -> None:
    """SIGTERM, workers first (they finish what they hold), then the ingress."""
    for daemon in running:
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0, daemon.logs[-10:]


async def session_texts(dsn: str, profile: str) -> list[str]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT m.message->>'content' AS content FROM octos_messages m "
            "JOIN octos_sessions s ON s.id = m.session_id "
            "WHERE s.scope = $1 AND s.session_key = $2 ORDER BY m.seq",
            profile,
            f"{profile}:telegram:{CHAT}",
        )
    finally:
        await connection.close()
    return [row["content"] for row in rows]


async def test_a_stop_at_the_ingress_cancels_the_turn_on_a_worker_and_is_answered_at_once(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, nats_client: Client
) -> None:
    profile = fresh_scope()
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        hook.hold("forever")  # never let go: only a cancel ends these turns
        config = cluster_config(
            tmp_path,
            {profile: profile_of(fake, hook, "followup")},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        worker = await start_role(config, "worker")
        running.append(worker)
        running.append(await start_role(config, "ingress"))
        fake.push_message(CHAT, "think forever about this", user_id=USER)
        await hook.wait_for(lambda: hook.asked("forever") == 1)
        fake.push_message(CHAT, "/stop", user_id=USER)
        await fake.wait_until(lambda: texts(fake) == ["🛑 Cancelled."], timeout_s=30)
        # An abort trigger in another language, the same way.
        fake.push_message(CHAT, "think forever again", user_id=USER)
        await hook.wait_for(lambda: hook.asked("forever") == 2)
        fake.push_message(CHAT, "停止", user_id=USER)
        await fake.wait_until(lambda: len(texts(fake)) == 2, timeout_s=30)
        fake.push_message(CHAT, "and now this", user_id=USER)
        await fake.wait_until(lambda: len(texts(fake)) == 3, timeout_s=30)
        assert texts(fake) == ["🛑 Cancelled.", "🛑 已取消。", "and now this"]
        cancelled = logged(worker, "cluster.turn_cancelled")
        assert [e["reason"] for e in cancelled] == ["stop", "stop"]
        await stop_all(running)
    # Each cancelled turn ran once (not delivered again) and left nothing in the session.
    assert hook.asked("forever") == 2
    assert await session_texts(postgres_dsn, profile) == ["and now this", "and now this"]
    assert await left_in(nats_client, f"{nats_prefix}_IN") == 0
    assert await left_in(nats_client, f"{nats_prefix}_OUT") == 0


async def test_interrupt_cancels_the_running_turn_for_the_newer_message(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, nats_client: Client
) -> None:
    profile = fresh_scope()
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        hook.hold("forever")
        config = cluster_config(
            tmp_path,
            {profile: profile_of(fake, hook, "interrupt")},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        worker = await start_role(config, "worker")
        running.append(worker)
        running.append(await start_role(config, "ingress"))
        fake.push_message(CHAT, "think forever about this", user_id=USER)
        await hook.wait_for(lambda: hook.asked("forever") == 1)
        fake.push_message(CHAT, "no, this instead", user_id=USER)
        await fake.wait_until(lambda: texts(fake) == ["no, this instead"], timeout_s=30)
        assert [e["reason"] for e in logged(worker, "cluster.turn_cancelled")] == ["interrupt"]
        await stop_all(running)
    assert hook.turns == ["think forever about this", "no, this instead"]
    assert await left_in(nats_client, f"{nats_prefix}_IN") == 0


async def test_collect_joins_the_messages_sent_during_a_turn_into_one_next_turn(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, nats_client: Client
) -> None:
    profile = fresh_scope()
    inbound = await follow_inbound(nats_client, nats_prefix)
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        first = hook.hold("first")
        config = cluster_config(
            tmp_path,
            {profile: profile_of(fake, hook, "collect")},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        worker = await start_role(config, "worker")
        running.append(worker)
        running.append(await start_role(config, "ingress"))
        fake.push_message(CHAT, "the first question", user_id=USER)
        await hook.wait_for(lambda: hook.asked("first") == 1)
        for text in ("a", "b", "c"):
            fake.push_message(CHAT, text, user_id=USER)
        await inbound.wait_for(lambda: len(inbound.seen) == 4)
        first.set()
        await fake.wait_until(lambda: len(texts(fake)) == 2, timeout_s=30)
        assert texts(fake) == ["the first question", COLLECTED_SHOWN]
        assert hook.turns == ["the first question", COLLECTED]
        # The two joined into a's turn are acknowledged as answered when their turn comes.
        await stop_all(running)
        assert [e["settled"] for e in logged(worker, "cluster.settled_acked")] == [
            "joined",
            "joined",
        ]
    assert await session_texts(postgres_dsn, profile) == [
        "the first question",
        "the first question",
        COLLECTED,
        COLLECTED,
    ]
    assert await left_in(nats_client, f"{nats_prefix}_IN") == 0
    assert await left_in(nats_client, f"{nats_prefix}_OUT") == 0


async def test_a_worker_killed_in_a_collected_turn_still_answers_each_message_once(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, nats_client: Client
) -> None:
    profile = fresh_scope()
    inbound = await follow_inbound(nats_client, nats_prefix)
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        first = hook.hold("first")
        collected = hook.hold("Queued")
        config = cluster_config(
            tmp_path,
            {profile: profile_of(fake, hook, "collect")},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            ack_wait_s=3.0,
        )
        doomed = await start_role(config, "worker")
        ingress = await start_role(config, "ingress")
        running.extend([doomed, ingress])
        fake.push_message(CHAT, "the first question", user_id=USER)
        await hook.wait_for(lambda: hook.asked("first") == 1)
        for text in ("a", "b", "c"):
            fake.push_message(CHAT, text, user_id=USER)
        await inbound.wait_for(lambda: len(inbound.seen) == 4)
        first.set()
        # The collected turn is running on the doomed worker: kill it there.
        await hook.wait_for(lambda: hook.asked("Queued") == 1)
        doomed.signal(signal.SIGKILL)
        await doomed.wait()
        collected.set()
        successor = await start_role(config, "worker")
        running.append(successor)
        await fake.wait_until(lambda: len(texts(fake)) == 2, timeout_s=60)
        await stop_all([successor, ingress])
        assert texts(fake) == ["the first question", COLLECTED_SHOWN]
        # Asked again after the kill (the reply was not stored), then answered once.
        assert hook.turns == ["the first question", COLLECTED, COLLECTED]
        assert len(logged(successor, "cluster.settled_acked")) == 2
    assert await left_in(nats_client, f"{nats_prefix}_IN") == 0
    assert await left_in(nats_client, f"{nats_prefix}_OUT") == 0
