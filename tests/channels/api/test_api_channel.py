"""The API channel in-process, on a real listener, with an inbound sender the test controls:
a full backlog (429/503 with Retry-After), a gateway that stops taking messages, replies
routed by chat and client id, and streams that end when the channel stops.

What needs the whole gateway (turns, sessions) runs through the daemon in test_api_daemon.py
and tests/e2e/test_http_attacks.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from bus import ANSWERS, FAILED, InboundMessage, InboundRefused, OutboundMessage, PipeClosed
from channels.api import ApiChannel
from channels.health import HealthStatus
from config import ApiChannelConfig


@dataclass
class ControlledInbound:
    """Records what the channel publishes; raises `refuse` instead when it is set."""

    refuse: Exception | None = None
    received: list[InboundMessage] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, message: InboundMessage) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.received.append(message)
        self.arrived.set()

    def close(self) -> None:
        pass

    async def next_message(self, count: int) -> InboundMessage:
        async with asyncio.timeout(10):
            while len(self.received) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.received[count - 1]


@dataclass
class Running:
    channel: ApiChannel
    inbound: ControlledInbound
    url: str

    async def post(self, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.post(self.url + "/v1/chat", json=body) as response,
        ):
            return response.status, dict(response.headers), await response.json()

    async def reply(self, message: InboundMessage, text: str) -> None:
        await self.channel.send(
            OutboundMessage(
                channel="api",
                chat_id=message.chat_id,
                content=text,
                metadata={ANSWERS: [message.message_id]},
            )
        )


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    channel = ApiChannel(ApiChannelConfig(port=0, reply_timeout_s=10), "p", None)
    inbound = ControlledInbound()
    task = asyncio.create_task(channel.start(inbound), name="api-channel")
    async with asyncio.timeout(10):
        await channel.wait_receiving()
    try:
        yield Running(channel, inbound, f"http://127.0.0.1:{channel.bound_port}")
    finally:
        await channel.stop()
        await task


@pytest.mark.parametrize(
    ("refusal", "status"),
    [
        (InboundRefused("chat", 2.5, "this chat's backlog is full"), 429),
        (InboundRefused("global", 2.5, "the backlog is full"), 503),
    ],
)
async def test_a_full_backlog_is_429_or_503_with_retry_after(
    running: Running, refusal: InboundRefused, status: int
) -> None:
    running.inbound.refuse = refusal
    code, headers, body = await running.post({"chat_id": "a", "content": "hi"})
    assert (code, headers["Retry-After"], body["retry_after_s"]) == (status, "3", 3)
    assert running.inbound.received == []


async def test_a_gateway_that_stops_taking_messages_is_503(running: Running) -> None:
    running.inbound.refuse = PipeClosed("closed")
    code, _headers, body = await running.post({"chat_id": "a", "content": "hi"})
    assert code == 503
    assert "retry" in body["error"]


async def test_same_client_id_in_two_chats_each_gets_its_own_reply(running: Running) -> None:
    victim = asyncio.create_task(
        running.post({"chat_id": "victim", "content": "secret", "client_message_id": "42"})
    )
    victim_message = await running.inbound.next_message(1)
    attacker = asyncio.create_task(
        running.post({"chat_id": "attacker", "content": "x", "client_message_id": "42"})
    )
    attacker_message = await running.inbound.next_message(2)
    await running.reply(victim_message, "victim private text")
    await running.reply(attacker_message, "attacker reply")
    assert (await attacker)[2]["reply"] == "attacker reply"
    assert (await victim)[2]["reply"] == "victim private text"


async def test_a_retry_waits_with_the_first_request_and_both_get_the_reply(
    running: Running,
) -> None:
    body = {"chat_id": "c", "content": "once", "client_message_id": "r1"}
    first = asyncio.create_task(running.post(body))
    message = await running.inbound.next_message(1)
    second = asyncio.create_task(running.post(body))
    await running.inbound.next_message(2)  # the gateway would recognise it as a duplicate
    await running.reply(message, "the one reply")
    assert (await first)[2]["reply"] == (await second)[2]["reply"] == "the one reply"
    # A retry after the reply gets it at once.
    assert (await running.post(body))[2]["reply"] == "the one reply"


async def test_a_stream_ends_with_error_when_the_channel_stops(running: Running) -> None:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.post(
            running.url + "/v1/chat", json={"chat_id": "s", "content": "hi", "stream": True}
        ) as response,
    ):
        await running.inbound.next_message(1)
        await running.channel.stop()
        text = (await response.read()).decode()
    (frame,) = [part for part in text.split("\n\n") if part]
    kind, data = frame.split("\n")
    assert kind == "event: error"
    assert "shutting down" in json.loads(data.removeprefix("data: "))["text"]


async def test_a_failed_turn_is_a_json_500_with_its_apology(running: Running) -> None:
    request = asyncio.create_task(running.post({"chat_id": "f", "content": "hi"}))
    message = await running.inbound.next_message(1)
    await running.channel.send(
        OutboundMessage(
            channel="api",
            chat_id="f",
            content="Sorry, the model is not available.",
            metadata={ANSWERS: [message.message_id], FAILED: True},
        )
    )
    status, _headers, body = await request
    assert status == 500
    assert body["error"] == "Sorry, the model is not available."


async def test_health_is_starting_until_it_listens_and_down_once_stopped() -> None:
    channel = ApiChannel(ApiChannelConfig(port=0, reply_timeout_s=10), "p", None)
    assert (await channel.health_check()).status is HealthStatus.STARTING
    task = asyncio.create_task(channel.start(ControlledInbound()), name="api-channel")
    async with asyncio.timeout(10):
        await channel.wait_receiving()
    assert (await channel.health_check()).status is HealthStatus.HEALTHY
    await channel.stop()
    await task
    assert (await channel.health_check()).status is HealthStatus.DOWN
