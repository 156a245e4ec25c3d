"""create_bus: the agent's end and the channels' end of the in-process bus."""

from __future__ import annotations

import asyncio

import pytest

from bus import (
    AgentHandle,
    BusPublisher,
    InboundMessage,
    InboundSender,
    OutboundEvent,
    OutboundMessage,
    PipeClosed,
    TypingStarted,
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


def _to(channel: str, content: str) -> OutboundMessage:
    return OutboundMessage(channel=channel, chat_id="c", content=content)


async def _drain(publisher: BusPublisher[InboundMessage]) -> list[str]:
    """The outbound events queued now, as `channel:content` (a signal by its type)."""
    taken: list[str] = []
    while publisher.outbound_depth():
        event = await publisher.recv_outbound()
        assert event is not None
        text = event.content if isinstance(event, OutboundMessage) else type(event).__name__
        taken.append(f"{event.channel}:{text}")
    return taken


async def _waiting_send(agent: AgentHandle, reply: OutboundMessage) -> asyncio.Task[None]:
    """`agent.send(reply)` in a task of its own, returned once it waits (or has sent)."""
    entered = asyncio.Event()

    async def send() -> None:
        entered.set()
        await agent.send(reply)

    task = asyncio.create_task(send(), name=f"send:{reply.content}")
    await asyncio.wait_for(entered.wait(), WAIT_S)
    return task


async def test_a_channels_replies_past_its_places_wait_while_other_channels_go_on() -> None:
    agent, publisher = create_bus(capacity=2, replies_per_channel=3)
    first = _to("down", "1")
    for reply in (first, _to("down", "2"), _to("down", "3")):
        await asyncio.wait_for(agent.send(reply), WAIT_S)
    fourth = await _waiting_send(agent, _to("down", "4"))
    assert not fourth.done()
    # Past `capacity` too: the outbound queue is bounded per channel, not as a whole.
    for n in range(3):
        await asyncio.wait_for(agent.send(_to("up", str(n))), WAIT_S)
    await asyncio.wait_for(agent.send(TypingStarted("down", "c")), WAIT_S)  # not a reply
    assert await _drain(publisher) == [
        *[f"down:{n}" for n in (1, 2, 3)],
        *[f"up:{n}" for n in range(3)],
        "down:TypingStarted",
    ]
    assert not fourth.done()

    publisher.finished(first)
    await asyncio.wait_for(fourth, WAIT_S)
    assert await _drain(publisher) == ["down:4"]


async def test_waiting_replies_go_in_the_order_sent() -> None:
    agent, publisher = create_bus(replies_per_channel=1)
    first = _to("down", "a")
    await agent.send(first)
    # What a start sends again is queued behind the places without waiting for them.
    await asyncio.wait_for(agent.send_in_order([_to("down", "b"), _to("down", "c")]), WAIT_S)
    last = await _waiting_send(agent, _to("down", "d"))

    delivered: list[str] = []
    while len(delivered) < 4:
        event = await asyncio.wait_for(publisher.recv_outbound(), WAIT_S)
        assert isinstance(event, OutboundMessage)
        delivered.append(event.content)
        publisher.finished(event)  # one place: the next waiting reply takes it
    await asyncio.wait_for(last, WAIT_S)
    assert delivered == ["a", "b", "c", "d"]


async def test_a_reply_cancelled_while_waiting_is_not_sent() -> None:
    agent, publisher = create_bus(replies_per_channel=1)
    first = _to("down", "a")
    await agent.send(first)
    waiting = await _waiting_send(agent, _to("down", "b"))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    publisher.finished(first)
    await asyncio.wait_for(agent.send(_to("down", "c")), WAIT_S)  # b holds no place
    assert await _drain(publisher) == ["down:a", "down:c"]


async def test_closing_the_agent_side_tells_the_replies_still_waiting() -> None:
    agent, _publisher = create_bus(replies_per_channel=1)
    await agent.send(_to("down", "a"))
    waiting = await _waiting_send(agent, _to("down", "b"))
    agent.close()
    with pytest.raises(PipeClosed):
        await asyncio.wait_for(waiting, WAIT_S)
