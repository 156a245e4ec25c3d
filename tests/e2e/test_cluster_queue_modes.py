"""Queue modes and stops in a cluster: an ingress process with the Telegram fake, worker
processes, and an agent (a webhook the test gates) whose turns never end unless let go.

A `/stop` or an abort trigger received by the ingress cancels the turn running on the worker
and is answered at once; `interrupt` cancels it for the newer message; `collect` joins the
messages sent during a turn into one next turn, answered once even when the worker running it
is SIGKILLed."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.aio.client import Client

from tests.cluster.harness import Observer
from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.gated_webhook import GatedWebhook
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess
from tests.support.nats import OwnStreams
from tests.support.postgres import column, fresh_scope

pytestmark = pytest.mark.slow

USER = 5150
CHAT = 7301
COLLECTED = "a\n---\nQueued #2: b\n---\nQueued #3: c"
#: The echo of it as Telegram shows it (a Markdown rule becomes a blank line).
COLLECTED_SHOWN = "a\n\nQueued #2: b\n\nQueued #3: c"


def config_of(
    directory: Path,
    fake: FakeTelegram,
    hook: GatedWebhook,
    mode: str,
    *,
    prefix: str,
    dsn: str,
    ack_wait_s: float = 30.0,
) -> tuple[str, Path]:
    """A fresh profile in `mode` on the fake Telegram, answered by `hook`; and its config."""
    profile = fresh_scope()
    agent = f"{{type: webhook, url: {hook.url}}}"
    config = cluster_config(
        directory,
        {profile: polling_profile(fake, USER, agent, queue_mode=mode)},
        prefix=prefix,
        dsn=dsn,
        ack_wait_s=ack_wait_s,
    )
    return profile, config


def texts(fake: FakeTelegram) -> list[str]:
    return [message["text"] for message in fake.bot_messages(CHAT)]


def logged(daemon: DaemonProcess, event: str) -> list[dict[str, object]]:
    return [e for e in daemon.logs if e.get("event") == event]


class Inbound:
    """What the ingress publishes to the inbound stream, and the workers' acknowledgements,
    seen as they happen (JetStream's messages are core NATS messages too)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.observer = Observer()

    async def follow(self, client: Client) -> Inbound:
        await client.subscribe(f"{self.prefix}.in.>", cb=self.observer.on_message)
        await client.subscribe(f"$JS.ACK.{self.prefix}_IN.>", cb=self.observer.on_message)
        return self

    def stored(self) -> int:
        return len(self.observer.on(f"{self.prefix}.in."))

    def acked(self) -> int:
        acks = self.observer.on("$JS.ACK.")
        return sum(1 for ack in acks if (ack.data or b"+ACK").startswith(b"+ACK"))

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        await self.observer.wait_for(condition, timeout_s=60)


async def stop_all(running: list[DaemonProcess]) -> None:
    """SIGTERM, workers first (they finish what they hold), then the ingress."""
    for daemon in running:
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0, daemon.logs[-10:]


async def session_texts(dsn: str, profile: str) -> list[object]:
    return await column(
        dsn,
        "SELECT m.message->>'content' FROM octos_messages m "
        "JOIN octos_sessions s ON s.id = m.session_id "
        "WHERE s.scope = $1 AND s.session_key = $2 ORDER BY m.seq",
        profile,
        f"{profile}:telegram:{CHAT}",
    )


async def worker_and_ingress(config: Path, running: list[DaemonProcess]) -> DaemonProcess:
    """A worker, then an ingress, on `config`; the worker is returned."""
    worker = await start_role(config, "worker")
    running.append(worker)
    running.append(await start_role(config, "ingress"))
    return worker


async def held_turn(fake: FakeTelegram, hook: GatedWebhook, text: str) -> None:
    """`text` sent, and its turn running (held at the agent: it has "forever" in it)."""
    before = hook.asked("forever")
    fake.push_message(CHAT, text, user_id=USER)
    await hook.wait_for(lambda: hook.asked("forever") == before + 1)


async def first_question_then_three_more(
    fake: FakeTelegram, hook: GatedWebhook, inbound: Inbound, first: asyncio.Event
) -> None:
    """The first question's turn is held while a, b and c are sent and stored; then let go."""
    fake.push_message(CHAT, "the first question", user_id=USER)
    await hook.wait_for(lambda: hook.asked("first") == 1)
    for text in ("a", "b", "c"):
        fake.push_message(CHAT, text, user_id=USER)
    await inbound.wait_for(lambda: inbound.stored() == 4)
    first.set()


async def test_a_stop_at_the_ingress_cancels_the_turn_on_a_worker_and_is_answered_at_once(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, streams: OwnStreams
) -> None:
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        hook.hold("forever")  # never let go: only a cancel ends these turns
        profile, config = config_of(
            tmp_path, fake, hook, "followup", prefix=nats_prefix, dsn=postgres_dsn
        )
        worker = await worker_and_ingress(config, running)
        await held_turn(fake, hook, "think forever about this")
        fake.push_message(CHAT, "/stop", user_id=USER)
        await fake.wait_until(lambda: texts(fake) == ["🛑 Cancelled."], timeout_s=30)
        # An abort trigger in another language, the same way.
        await held_turn(fake, hook, "think forever again")
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
    assert await streams.left_once_settled("IN", timeout_s=10) == 0
    assert await streams.left_once_settled("OUT", timeout_s=10) == 0


async def test_interrupt_cancels_the_running_turn_for_the_newer_message(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, streams: OwnStreams
) -> None:
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        hook.hold("forever")
        _, config = config_of(
            tmp_path, fake, hook, "interrupt", prefix=nats_prefix, dsn=postgres_dsn
        )
        worker = await worker_and_ingress(config, running)
        await held_turn(fake, hook, "think forever about this")
        fake.push_message(CHAT, "no, this instead", user_id=USER)
        await fake.wait_until(lambda: texts(fake) == ["no, this instead"], timeout_s=30)
        assert [e["reason"] for e in logged(worker, "cluster.turn_cancelled")] == ["interrupt"]
        await stop_all(running)
    assert hook.turns == ["think forever about this", "no, this instead"]
    assert await streams.left_once_settled("IN", timeout_s=10) == 0


async def test_collect_joins_the_messages_sent_during_a_turn_into_one_next_turn(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, nats_client: Client, streams: OwnStreams
) -> None:
    inbound = await Inbound(nats_prefix).follow(nats_client)
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        first = hook.hold("first")
        profile, config = config_of(
            tmp_path, fake, hook, "collect", prefix=nats_prefix, dsn=postgres_dsn
        )
        worker = await worker_and_ingress(config, running)
        await first_question_then_three_more(fake, hook, inbound, first)
        await fake.wait_until(lambda: len(texts(fake)) == 2, timeout_s=30)
        assert texts(fake) == ["the first question", COLLECTED_SHOWN]
        assert hook.turns == ["the first question", COLLECTED]
        # The two joined into a's turn are acknowledged as answered when their turn comes.
        await inbound.wait_for(lambda: inbound.acked() == 4)
        settled = [e["settled"] for e in logged(worker, "cluster.settled_acked")]
        assert settled == ["joined", "joined"]
        await stop_all(running)
    assert await session_texts(postgres_dsn, profile) == [
        "the first question",
        "the first question",
        COLLECTED,
        COLLECTED,
    ]
    assert await streams.left_once_settled("IN", timeout_s=10) == 0
    assert await streams.left_once_settled("OUT", timeout_s=10) == 0


async def test_a_worker_killed_in_a_collected_turn_still_answers_each_message_once(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, nats_client: Client, streams: OwnStreams
) -> None:
    inbound = await Inbound(nats_prefix).follow(nats_client)
    async with GatedWebhook() as hook, FakeTelegram() as fake, processes() as running:
        first = hook.hold("first")
        collected = hook.hold("Queued")
        _, config = config_of(
            tmp_path, fake, hook, "collect", prefix=nats_prefix, dsn=postgres_dsn, ack_wait_s=3.0
        )
        doomed = await start_role(config, "worker")
        ingress = await start_role(config, "ingress")
        running.extend([doomed, ingress])
        await first_question_then_three_more(fake, hook, inbound, first)
        # The collected turn is running on the doomed worker: kill it there.
        await hook.wait_for(lambda: hook.asked("Queued") == 1)
        doomed.signal(signal.SIGKILL)
        await doomed.wait()
        collected.set()
        successor = await start_role(config, "worker")
        running.append(successor)
        await fake.wait_until(lambda: len(texts(fake)) == 2, timeout_s=60)
        # The first question by the doomed worker, a, b and c by its successor.
        await inbound.wait_for(lambda: inbound.acked() == 4)
        await stop_all([successor, ingress])
        assert texts(fake) == ["the first question", COLLECTED_SHOWN]
        # Asked again after the kill (the reply was not stored), then answered once.
        assert hook.turns == ["the first question", COLLECTED, COLLECTED]
        assert len(logged(successor, "cluster.settled_acked")) == 2
    assert await streams.left_once_settled("IN", timeout_s=10) == 0
    assert await streams.left_once_settled("OUT", timeout_s=10) == 0
