"""Streamed replies and typing in a cluster, worker and ingress as separate processes: Telegram
replies grow in edits and finish in their own message whichever ingress takes the reply from
the stream, the HTTP API streams its snapshots, and a turn whose live events reach nobody is
still answered once, whole."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from nats.aio.client import Client

from bus import InboundMessage
from gateway.cluster.codec import InboundEnvelope, platform_id
from gateway.cluster.streams import ClusterNames
from tests.channels.api.test_api_daemon import Api
from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import polling_profile
from tests.e2e.test_cluster_chaos import holds_lease
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import free_port
from tests.support.nats import OwnStreams
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 5151
PARTITIONS = 8
#: Eight pieces 0.15 s apart, shown at most every 0.3 s: each reply is edited as it grows.
AGENT = "{type: echo, delay_s: 0.15, pieces: 8}"
WORDS = "streams its reply word by word so that the chat sees it growing in place"


def streaming_telegram(fake: FakeTelegram) -> str:
    return polling_profile(fake, USER, AGENT, edit_interval_s=0.3)


def texts(fake: FakeTelegram, chat: int) -> list[str]:
    return [str(m["text"]) for m in fake.bot_messages(chat)]


def edits_of(fake: FakeTelegram, message: dict[str, Any]) -> int:
    return sum(
        1
        for call in fake.calls("editMessageText")
        if str(call.params.get("message_id")) == str(message["message_id"])
        and str(call.params.get("chat_id")) == str(message["chat"]["id"])
    )


def calls_to(fake: FakeTelegram, method: str, chat: int) -> int:
    return sum(1 for call in fake.calls(method) if str(call.params.get("chat_id")) == str(chat))


async def test_telegram_replies_stream_in_edits_and_finish_in_place_across_two_ingress(
    tmp_path: Any, nats_prefix: str, postgres_dsn: str, streams: OwnStreams
) -> None:
    chats = [8101 + n for n in range(6)]
    expected = {chat: [f"{chat} message {n} {WORDS}" for n in range(2)] for chat in chats}
    async with FakeTelegram() as fake, processes() as running:
        config = cluster_config(
            tmp_path,
            {fresh_scope(): streaming_telegram(fake)},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            partitions=PARTITIONS,
        )
        running.append(await start_role(config, "worker"))
        # Both deliver replies; the one holding the poller lease takes every message in.
        running.append(await start_role(config, "ingress"))
        running.append(await start_role(config, "ingress"))
        for n in range(2):
            for chat in chats:
                fake.push_message(chat, expected[chat][n], user_id=USER)
        await fake.wait_until(
            lambda: all(texts(fake, chat) == expected[chat] for chat in chats), timeout_s=90
        )
        # The text shows before the final is delivered: wait until the ingress that shows the
        # turns (the poller) has delivered every final handed to it.
        [showing] = [daemon for daemon in running[1:] if holds_lease(daemon)]
        await showing.wait_logged("cluster.hand_over_answered", more_than=2 * len(chats) - 1)
        for daemon in reversed(running):
            daemon.signal(signal.SIGTERM)
            assert await daemon.wait() == 0, daemon.logs[-10:]
    # Every reply grew in its own message and was finished there: no draft left beside it,
    # no final sent a second time, and "typing" was shown in every chat.
    for chat in chats:
        assert texts(fake, chat) == expected[chat]
        assert all(edits_of(fake, message) >= 1 for message in fake.bot_messages(chat))
        assert calls_to(fake, "sendChatAction", chat) >= 1
    ingress = running[1:]
    handed = [e for d in ingress for e in d.logs if e.get("event") == "cluster.reply_handed_over"]
    assert len(handed) == 2 * len(chats)
    # Replies taken by the ingress that did not show their turn went to the one that did.
    assert {e["elsewhere"] for e in handed} == {True, False}
    assert len({e["ingress"] for e in handed}) == 1
    assert await streams.left_once_settled("OUT", timeout_s=10) == 0


async def test_the_api_streams_snapshots_then_done_through_a_cluster(
    tmp_path: Any, nats_prefix: str, postgres_dsn: str
) -> None:
    port = free_port()
    async with processes() as running:
        config = cluster_config(
            tmp_path,
            {fresh_scope(): f"agent: {AGENT}\nchannels: [{{type: api, port: 0}}]\n"},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        running.append(await start_role(config, "worker"))
        running.append(
            await start_role(config, "ingress", "--api-port", str(port), ready="api.web_chat_ready")
        )
        events = await Api(f"http://127.0.0.1:{port}").stream("sse", WORDS)
    kinds = [kind for kind, _text in events]
    assert kinds[-1] == "done"
    assert set(kinds[:-1]) == {"snapshot"}
    snapshots = [text for kind, text in events if kind == "snapshot"]
    assert len(snapshots) >= 2
    assert all(WORDS.startswith(snapshot) for snapshot in snapshots)
    assert events[-1][1] == WORDS


async def test_a_turn_whose_live_events_reach_no_ingress_is_answered_once_whole(
    tmp_path: Any, nats_prefix: str, postgres_dsn: str, nats_client: Client, streams: OwnStreams
) -> None:
    profile, chat = fresh_scope(), 8201
    async with FakeTelegram() as fake, processes() as running:
        config = cluster_config(
            tmp_path,
            {profile: streaming_telegram(fake)},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            partitions=PARTITIONS,
        )
        running.append(await start_role(config, "worker"))
        ingress = await start_role(config, "ingress")
        running.append(ingress)
        # As if an ingress that has gone since took it in: nobody hears its live events.
        message = InboundMessage(
            channel="telegram",
            sender_id=str(USER),
            chat_id=str(chat),
            content=WORDS,
            message_id="gone-1",
        )
        envelope = InboundEnvelope(
            profile,
            platform_id(profile, message) or "gone-1",
            message,
            ingress="ingress-gone",
            streams=True,
            shows_typing=True,
        )
        names = ClusterNames(nats_prefix, PARTITIONS)
        await nats_client.jetstream().publish(
            names.inbound_subject(names.partition_of_chat(profile, message)),
            envelope.body(),
            headers=envelope.headers(envelope.inbound_id),
        )
        await fake.wait_until(lambda: texts(fake, chat) == [WORDS], timeout_s=30)
        await ingress.wait_log(lambda e: e.get("event") == "cluster.live_ingress_gone")
        # The next message, taken in by the ingress that runs, streams as usual.
        fake.push_message(chat, f"and now {WORDS}", user_id=USER)
        await fake.wait_until(
            lambda: texts(fake, chat) == [WORDS, f"and now {WORDS}"], timeout_s=30
        )
        await ingress.wait_logged("cluster.hand_over_answered", more_than=0)
        for daemon in reversed(running):
            daemon.signal(signal.SIGTERM)
            assert await daemon.wait() == 0, daemon.logs[-10:]
    first, second = fake.bot_messages(chat)
    assert edits_of(fake, first) == 0  # sent once, whole
    assert edits_of(fake, second) >= 1
    assert calls_to(fake, "sendMessage", chat) == 2
    assert await streams.left_once_settled("OUT", timeout_s=10) == 0
