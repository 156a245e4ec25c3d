"""The ingress's intake on real JetStream: durable before it returns, a platform retry stored
once, a held request's retries all published, strangers refused at the edge, and a stream
that cannot be written refused with a retry-after (the channel tells the platform to retry)."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from prometheus_client import CollectorRegistry

from bus import REACTION, InboundMessage, InboundRefused, OutboundMessage, PipeClosed, reaction_note
from channels.access.allow import AllowList
from gateway.cluster.codec import REPLY_SUBJECT, REQUEST, InboundEnvelope
from gateway.cluster.ingress import ClusterIntake
from gateway.cluster.streams import ensure_streams, names_of
from gateway.metrics import GatewayMetrics
from gateway.turn.strangers import StrangerNotices
from tests.channels.recording import RecordingChannel
from tests.cluster.harness import nats_config


class ApiLike(RecordingChannel):
    replies_to_retries = True


def message(text: str, *, channel: str = "rec", sender: str = "7") -> InboundMessage:
    return InboundMessage(
        channel=channel, sender_id=sender, chat_id="chat-9", content=text, message_id="m-1"
    )


async def intake_for(
    client: Client, prefix: str, *channels: RecordingChannel, inbound_reactions: bool = False
) -> tuple[ClusterIntake, list[OutboundMessage]]:
    config = nats_config(prefix)
    await ensure_streams(client.jetstream(), config)
    notices: list[OutboundMessage] = []

    async def keep(notice: OutboundMessage) -> None:
        notices.append(notice)

    by_name = {channel.name: channel for channel in channels}
    intake = ClusterIntake(
        "main",
        client,
        names_of(config),
        "ingress-a",
        by_name.get,
        StrangerNotices(keep),
        GatewayMetrics.create(CollectorRegistry()),
        inbound_reactions=inbound_reactions,
    )
    return intake, notices


async def stored(client: Client, prefix: str) -> list[InboundEnvelope]:
    js = client.jetstream()
    info = await js.stream_info(f"{prefix}_IN")
    if info.state.messages == 0:
        return []
    envelopes = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await js.get_msg(f"{prefix}_IN", seq)
        assert raw.data is not None
        envelopes.append(InboundEnvelope.decode(raw.headers, raw.data))
    return envelopes


async def test_a_platform_retry_is_stored_once(nats_client: Client, nats_prefix: str) -> None:
    intake, _notices = await intake_for(nats_client, nats_prefix, RecordingChannel())
    await intake.admit(message("first"))
    # send returned: the message is in the stream already (durable before acknowledged).
    assert [e.message.content for e in await stored(nats_client, nats_prefix)] == ["first"]
    await intake.admit(message("first"))  # the platform did not see our ack and retries
    assert len(await stored(nats_client, nats_prefix)) == 1


async def test_every_attempt_of_a_held_request_is_published_with_its_reply_subject(
    nats_client: Client, nats_prefix: str
) -> None:
    intake, _notices = await intake_for(nats_client, nats_prefix, ApiLike("api"))
    await intake.admit(message("ask", channel="api"))
    await intake.admit(message("ask", channel="api"))
    envelopes = await stored(nats_client, nats_prefix)
    assert len(envelopes) == 2
    assert envelopes[0].inbound_id == envelopes[1].inbound_id  # the worker knows them as one
    assert all(e.request for e in envelopes)
    js = nats_client.jetstream()
    raw = await js.get_msg(f"{nats_prefix}_IN", 1)
    assert raw.headers is not None
    assert raw.headers[REQUEST] == "1"
    assert raw.headers[REPLY_SUBJECT] == f"{nats_prefix}.reply.ingress-a"


def reaction() -> InboundMessage:
    return InboundMessage(
        channel="rec",
        sender_id="7",
        chat_id="chat-9",
        content=reaction_note("👍", None),
        message_id="reaction-1",
        metadata={REACTION: {"emoji": "👍", "message_id": "bot-1"}},
    )


@pytest.mark.parametrize("inbound_reactions", [False, True])
async def test_a_reaction_is_published_only_with_inbound_reactions(
    nats_client: Client, nats_prefix: str, inbound_reactions: bool
) -> None:
    intake, _notices = await intake_for(
        nats_client, nats_prefix, RecordingChannel(), inbound_reactions=inbound_reactions
    )
    await intake.admit(reaction())
    published = [e.message.content for e in await stored(nats_client, nats_prefix)]
    assert published == (["[reaction 👍 to a message]"] if inbound_reactions else [])


async def test_a_stranger_is_told_their_id_and_nothing_is_published(
    nats_client: Client, nats_prefix: str
) -> None:
    channel = RecordingChannel()
    channel.allow = AllowList(["1"])
    intake, notices = await intake_for(nats_client, nats_prefix, channel)
    await intake.admit(message("let me in", sender="666"))
    await intake.admit(message("let me in", sender="666"))
    assert [n.content for n in notices] == [
        "Sorry, this bot does not know you yet. Your id is 666: ask its owner to add it to the "
        "allow list."
    ]
    assert await stored(nats_client, nats_prefix) == []


async def test_a_stream_that_cannot_be_written_refuses_with_a_retry(
    nats_client: Client, nats_prefix: str
) -> None:
    intake, _notices = await intake_for(nats_client, nats_prefix, RecordingChannel())
    await nats_client.jetstream().delete_stream(f"{nats_prefix}_IN")
    with pytest.raises(InboundRefused) as refused:
        await intake.admit(message("nowhere to go"))
    assert refused.value.http_status == 503
    assert refused.value.retry_after_s == 5.0
    intake.stop()
    with pytest.raises(PipeClosed):
        await intake.admit(message("too late"))
