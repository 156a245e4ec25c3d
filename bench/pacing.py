"""Outbound pacing against a Telegram that enforces its flood limits.

The real channel manager and Telegram channel (python-telegram-bot) deliver to the fake Bot API
with `FloodControl` on (30 messages a second per bot, 1 a second per chat, 20 a minute per
group; 429 with `retry_after` past them, longer after repeated refusals). Three scenarios:

- (a) replies: 2,000 replies to 500 chats, all due at once;
- (b) streams: 50 streamed replies of 40 snapshots each (10 a second per stream) in 5 group
  chats, then their finals;
- (c) both at once.

Each runs twice in the same process: paced (the published limits, `channels/telegram/channel.py`)
and with pacing off (`rate_limits: {paced: false}`: every call sent at once, a refused one
waiting its own `retry_after`, as before pacing), the baseline. Per run: the time to the last
final reply against the limits' lower bound (a: N / 30 s; b: a group's 2 messages per stream at
1 a second; c: the larger of the two with the streams' messages added to N), the 429s
received, the finals delivered, and the edits sent against the snapshots produced. Goals: no
429 and every final delivered when paced, (a) within 1.2 times its lower bound.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from bench.report import Figure
from bus import OutboundEvent, OutboundMessage, StreamSnapshot, create_bus
from channels.errors import DeliveryError
from channels.outbound.manager import ChannelManager
from channels.registry import ChannelContext, build_channel
from channels.retry.pacing import RateLimits
from channels.telegram.channel import RATE_LIMITS
from config import TelegramConfig
from tests.fakes.telegram_server import FakeTelegram, FloodControl

SUITE = "pacing"
MAX_RATIO_A = 1.2
SNAPSHOT_INTERVAL_S = 0.1

_Send = Callable[[OutboundEvent], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Sizes:
    replies: int = 2_000
    reply_chats: int = 500
    streams: int = 50
    snapshots: int = 40
    groups: int = 5
    #: A run that has not delivered every final by then is reported as it stands: an unpaced
    #: bot flooding the fake can take far longer (each excess lengthens the next hold).
    give_up_s: float = 180.0


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    replies: bool
    streams: bool

    def lower_bound_s(self, sizes: Sizes) -> float:
        """The soonest the last final can arrive within the limits: the account's burst and
        then its rate for every message; each group chat's burst and then its rate for one
        message a stream (opened late, a stream's first message can be its final); the time
        the streams take to produce their snapshots."""
        account, chat = RATE_LIMITS.account, RATE_LIMITS.chat
        assert account is not None
        assert chat is not None
        streams = sizes.streams if self.streams else 0
        messages = (sizes.replies if self.replies else 0) + streams
        account_s = max(0, messages - account.count) * account.per_s / account.count
        if not streams:
            return account_s
        group_s = max(0.0, streams / sizes.groups - chat.count) * chat.per_s / chat.count
        streaming_s = sizes.snapshots * SNAPSHOT_INTERVAL_S
        return max(account_s, group_s, streaming_s)


SCENARIOS = (
    Scenario("a: 2,000 replies to 500 chats", replies=True, streams=False),
    Scenario("b: 50 streams in 5 groups", replies=False, streams=True),
    Scenario("c: both at once", replies=True, streams=True),
)


@dataclass(frozen=True, slots=True)
class Outcome:
    last_final_s: float
    refusals: int
    finals: int
    expected_finals: int
    edits: int
    snapshots: int


async def _run(scenario: Scenario, sizes: Sizes, *, paced: bool) -> Outcome:
    flood = FloodControl()
    async with FakeTelegram(flood=flood) as fake:
        with tempfile.TemporaryDirectory(prefix="bench-pacing-") as data_dir:
            config = TelegramConfig(
                token=fake.token,
                base_url=fake.base_url,
                base_file_url=fake.base_file_url,
                allow=["*"],
                poll_timeout_s=5,
            )
            channel = build_channel(config, ChannelContext("bench", Path(data_dir)))
            agent, publisher = create_bus()
            finals: dict[str, float] = {}
            expected = (sizes.replies if scenario.replies else 0) + (
                sizes.streams if scenario.streams else 0
            )
            all_delivered = asyncio.Event()

            def delivered(
                reply: OutboundMessage, _ids: list[str], error: DeliveryError | None
            ) -> None:
                if error is None and reply.delivery_id is not None:
                    finals[reply.delivery_id] = time.perf_counter()
                if len(finals) >= expected:
                    all_delivered.set()

            manager = ChannelManager("bench", publisher, on_delivered=delivered)
            manager.register(channel, rate_limits=RATE_LIMITS if paced else RateLimits(paced=False))
            async with asyncio.TaskGroup() as group:
                group.create_task(manager.run(), name="bench-manager")
                await fake.wait_for_calls("getUpdates", timeout_s=30)
                started = time.perf_counter()
                snapshots = 0
                if scenario.replies:
                    group.create_task(_replies(agent.send, sizes), name="bench-replies")
                if scenario.streams:
                    snapshots = sizes.streams * sizes.snapshots
                    group.create_task(_streams(agent.send, sizes), name="bench-streams")
                try:
                    async with asyncio.timeout(sizes.give_up_s):
                        await all_delivered.wait()
                    last = max(finals.values())
                except TimeoutError:
                    last = time.perf_counter()
                await manager.stop()
            return Outcome(
                last_final_s=last - started,
                refusals=len(flood.refusals),
                finals=len(finals),
                expected_finals=expected,
                edits=len(fake.calls("editMessageText")),
                snapshots=snapshots,
            )


async def _replies(send: _Send, sizes: Sizes) -> None:
    for index in range(sizes.replies):
        chat = 1_000_000 + index % sizes.reply_chats
        await send(
            OutboundMessage(
                channel="telegram",
                chat_id=str(chat),
                content=f"reply {index} to chat {chat}",
                delivery_id=f"reply-{index}",
            )
        )


async def _streams(send: _Send, sizes: Sizes) -> None:
    """Every stream grows by a word every `SNAPSHOT_INTERVAL_S`, as a model streams."""

    def reply(stream: int, words: int, final: bool) -> OutboundMessage:
        return OutboundMessage(
            channel="telegram",
            chat_id=str(-1_000_000 - stream % sizes.groups),
            content=" ".join(f"word{n}" for n in range(words)) + f" (stream {stream})",
            stream_id=f"stream-{stream}",
            delivery_id=f"stream-{stream}" if final else None,
        )

    for words in range(1, sizes.snapshots + 1):
        for stream in range(sizes.streams):
            await send(StreamSnapshot(reply(stream, words, final=False)))
        await asyncio.sleep(SNAPSHOT_INTERVAL_S)
    for stream in range(sizes.streams):
        await send(reply(stream, sizes.snapshots, final=True))


def figures(sizes: Sizes = Sizes()) -> list[Figure]:
    """Every scenario, paced and with pacing off, in one process (a fresh fake each)."""
    # The baseline logs every refusal and retry: thousands of lines that say nothing here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    try:
        return list(_figures(sizes))
    finally:
        structlog.reset_defaults()


def _figures(sizes: Sizes) -> list[Figure]:
    results: list[Figure] = []
    for scenario in SCENARIOS:
        bound_s = scenario.lower_bound_s(sizes)
        paced = asyncio.run(_run(scenario, sizes, paced=True))
        baseline = asyncio.run(_run(scenario, sizes, paced=False))
        name = scenario.key
        ratio = paced.last_final_s / bound_s if bound_s > 0 else 0.0
        results += [
            Figure(SUITE, f"{name}: lower bound", round(bound_s, 1), "s"),
            Figure(SUITE, f"{name}: last final, paced", round(paced.last_final_s, 1), "s"),
            Figure(
                SUITE,
                f"{name}: last final, pacing off (baseline)",
                round(baseline.last_final_s, 1),
                "s",
            ),
            (
                Figure.at_most(
                    SUITE, f"{name}: paced / lower bound", ratio, "ratio", MAX_RATIO_A, digits=2
                )
                if scenario.key.startswith("a")
                else Figure(SUITE, f"{name}: paced / lower bound", round(ratio, 2), "ratio")
            ),
            Figure.at_most(SUITE, f"{name}: 429s, paced", paced.refusals, "429s", 0, digits=0),
            Figure(SUITE, f"{name}: 429s, pacing off", baseline.refusals, "429s"),
            Figure(
                SUITE,
                f"{name}: finals delivered, paced",
                paced.finals,
                "finals",
                target=f"= {paced.expected_finals}",
                ok=paced.finals == paced.expected_finals,
            ),
            Figure(SUITE, f"{name}: finals delivered, pacing off", baseline.finals, "finals"),
        ]
        if paced.snapshots:
            results += [
                Figure(SUITE, f"{name}: snapshots produced", paced.snapshots, "snapshots"),
                Figure(SUITE, f"{name}: edits sent, paced", paced.edits, "edits"),
                Figure(SUITE, f"{name}: edits sent, pacing off", baseline.edits, "edits"),
            ]
    return results


def run() -> list[Figure]:
    return figures()
