"""create_bus: the agent's end and the channels' end of the in-process bus."""

from __future__ import annotations

import asyncio

import pytest

from bus import (
    AgentHandle,
    InboundMessage,
    InboundSender,
    OutboundEvent,
    OutboundMessage,
    PipeClosed,
    create_bus,
)

WAIT_S = 5.0


def _inbound(i: int, channel: str = "test") -> InboundMessage:
    return InboundMessage(channel=channel, sender_id="u", chat_id="c", content=str(i))


def _reply(event: OutboundEvent) -> OutboundMessage:
    """An event the echo agent sent: only ever a whole reply."""
    assert isinstance(event, OutboundMessage)
    return event


async def _echo_agent(agent: AgentHandle) -> int:
    """Answers every inbound message, then closes its side; returns how many it answered."""
    answered = 0
    async for message in agent:
        await agent.send(
            OutboundMessage(
                channel=message.channel, chat_id=message.chat_id, content=message.content
            )
        )
        answered += 1
    agent.close()
    return answered


async def test_round_trip_through_an_agent() -> None:
    agent, publisher = create_bus(capacity=4)

    async def publish_all() -> None:
        for i in range(20):
            await publisher.publish(_inbound(i))
        publisher.close()

    async with asyncio.TaskGroup() as group:
        answered = group.create_task(_echo_agent(agent), name="echo-agent")
        # Published in a task of its own: with 20 messages and room for 4 each way, publishing
        # before reading the replies would fill both pipes and stall, as it should.
        group.create_task(publish_all(), name="publisher")
        replies = [_reply(event).content async for event in publisher.outbound()]
    assert replies == [str(i) for i in range(20)]
    assert answered.result() == 20
    assert await publisher.recv_outbound() is None


async def test_agent_stops_only_after_every_channel_sender_closes() -> None:
    agent, publisher = create_bus(capacity=8)
    telegram, discord = publisher.inbound_sender(), publisher.inbound_sender()
    publisher.close()  # the publisher's own sender: the channels' clones stay open
    await telegram.send(_inbound(1, "telegram"))
    telegram.close()
    first = await agent.recv()
    assert first is not None
    assert (first.channel, first.content) == ("telegram", "1")

    waiting = asyncio.create_task(agent.recv(), name="agent-recv")
    await discord.send(_inbound(2, "discord"))
    received = await asyncio.wait_for(waiting, WAIT_S)
    assert received is not None
    assert received.channel == "discord"

    ended = asyncio.create_task(agent.recv(), name="agent-recv-end")
    discord.close()
    assert await asyncio.wait_for(ended, WAIT_S) is None


async def test_extra_outbound_senders_keep_the_outbound_side_open() -> None:
    agent, publisher = create_bus(capacity=8)
    streamer = agent.outbound_sender()
    agent.close()
    await streamer.send(OutboundMessage(channel="api", chat_id="c", content="late"))
    reply = await publisher.recv_outbound()
    assert isinstance(reply, OutboundMessage)
    assert reply.content == "late"
    streamer.close()
    assert await publisher.recv_outbound() is None


async def test_publish_after_close_raises() -> None:
    _agent, publisher = create_bus(capacity=2)
    publisher.close()
    with pytest.raises(PipeClosed):
        await publisher.publish(_inbound(0))


async def test_inbound_backpressure_and_depths() -> None:
    agent, publisher = create_bus(capacity=2)
    await publisher.publish(_inbound(1))
    await publisher.publish(_inbound(2))
    assert agent.inbound_depth() == 2
    entered, published = asyncio.Event(), asyncio.Event()

    async def third() -> None:
        entered.set()
        await publisher.publish(_inbound(3))
        published.set()

    task = asyncio.create_task(third(), name="third-publish")
    await asyncio.wait_for(entered.wait(), WAIT_S)
    assert not published.is_set()
    first = await agent.recv()
    assert first is not None
    assert first.content == "1"
    await asyncio.wait_for(published.wait(), WAIT_S)
    await task
    assert agent.inbound_depth() == 2

    await agent.send(OutboundMessage(channel="test", chat_id="c", content="r"))
    assert publisher.outbound_depth() == 1


async def test_many_channels_many_messages_nothing_dropped() -> None:
    agent, publisher = create_bus(capacity=16)
    channels, per_channel = 8, 300

    async def channel(index: int, own: InboundSender) -> None:
        for i in range(per_channel):
            await own.send(_inbound(i, f"ch{index}"))
        own.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(_echo_agent(agent), name="echo-agent")
        for index in range(channels):
            group.create_task(channel(index, publisher.inbound_sender()), name=f"channel-{index}")
        publisher.close()
        replies = [_reply(event) async for event in publisher.outbound()]

    assert len(replies) == channels * per_channel
    for index in range(channels):
        contents = [int(r.content) for r in replies if r.channel == f"ch{index}"]
        assert contents == list(range(per_channel))
