"""The platform daemon tests' side of a chat with the echo agent.

Each platform module describes its channel (`echo_profile`), says how an allowed user writes
in a chat and what the bot's messages there show (`EchoBot.say`, `EchoBot.shown`), and gets
the waits every module needs: the reply shown, and a barrier after which everything before it
in the chat has been delivered (turns in a chat run in order, and so do their deliveries).
"""

from __future__ import annotations

import itertools
import signal
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar

from tests.e2e.conftest import (
    CLOCK_TOLERANCE_S,
    DAEMON_ENV,
    EDIT_INTERVAL_S,
    WAIT_S,
    gaps_s,
    no_repeats,
    running_daemon,
)
from tests.support.daemon import DaemonProcess

Chat = TypeVar("Chat")

#: A reply the echo agent streams slowly enough to be shown growing by several edits.
STREAMED_TEXT = " ".join(f"Streaming shows the reply growing, word {n}." for n in range(1, 25))

_markers = itertools.count(1)


def barrier_marker() -> str:
    """A barrier's text: unique in the whole test run, so one never answers for another."""
    return f"barrier {next(_markers)}"


def echo_profile(channel: str, *, delay_s: float = 0.3, pieces: int = 8) -> str:
    """A profile of one channel (`channel`: its YAML list item) and the echo agent, which
    streams each reply in `pieces` over `delay_s`. Each message is a turn of its own."""
    return (
        "queue_mode: followup\n"
        f"agent: {{type: echo, delay_s: {delay_s}, pieces: {pieces}}}\n"
        f"channels:\n{channel}"
    )


class EchoBot(ABC, Generic[Chat]):
    """Writes as an allowed user and waits for the echo in the bot's messages."""

    @abstractmethod
    async def say(self, chat: Chat, text: str) -> object:
        """Write `text` in `chat` as the allowed user."""

    @abstractmethod
    def shown(self, chat: Chat) -> list[str]:
        """The texts of the bot's messages in `chat`, oldest first, as they show now."""

    @abstractmethod
    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait (within the tests' patience) until the platform fake sees `condition` true."""

    async def reply_shown(self, chat: Chat, text: str) -> None:
        """Wait until the bot's last message in `chat` shows all of `text`."""
        await self.wait_until(lambda: self.shown(chat)[-1:] == [text])

    async def reply_shown_in(self, chat: Chat, text: str) -> list[str]:
        """Write `text` in `chat` (one of the test's own) and wait past a barrier: the texts of
        the bot's messages its reply was shown in."""
        await self.said_and_delivered(chat, text)
        *reply, _barrier = self.shown(chat)
        return reply

    async def said_and_delivered(self, chat: Chat, text: str) -> None:
        """Write `text` in `chat` and wait past a barrier: its reply, however many messages and
        edits it took, has been delivered."""
        await self.say(chat, text)
        await self.barrier(chat)

    async def streamed_reply_delivered(self, chat: Chat) -> str:
        """`STREAMED_TEXT` written in `chat` and its reply delivered, shown growing by edits:
        the text the reply should end up showing."""
        await self.said_and_delivered(chat, STREAMED_TEXT)
        return STREAMED_TEXT

    async def barrier(self, chat: Chat) -> None:
        """Another message in the chat, answered: everything before it has been delivered."""
        marker = barrier_marker()
        await self.say(chat, marker)
        await self.reply_shown(chat, marker)


#: The echo agent of `assert_a_stream_cut_by_sigkill_is_finished_in_place`: `STREAMED_TEXT` in
#: four pieces two seconds apart, so the kill lands between two edits of the reply.
MID_STREAM_PIECES = 4
MID_STREAM_DELAY_S = 2.0


async def assert_a_stream_cut_by_sigkill_is_finished_in_place(
    directory: Path,
    profile: Callable[[float, int], str],
    bot_on: Callable[[DaemonProcess], EchoBot[Chat]],
    chat: Chat,
    *,
    ready: Callable[[DaemonProcess], Awaitable[None]],
) -> None:
    """SIGKILL the daemon while a reply streams in `chat` (its message opened and edited once),
    restart it: the resumed turn finishes that message, so the chat shows the reply once, whole,
    and no part of it beside. `profile(delay_s, pieces)` is the platform's echo profile,
    `bot_on(daemon)` its `EchoBot`, `ready(daemon)` waits until the daemon receives there."""

    def partial(texts: list[str]) -> bool:
        return len(texts) == 1 and texts[0] != STREAMED_TEXT and STREAMED_TEXT.startswith(texts[0])

    async with running_daemon(
        directory, {"main": profile(MID_STREAM_DELAY_S, MID_STREAM_PIECES)}
    ) as first:
        await ready(first)
        bot = bot_on(first)
        await bot.say(chat, STREAMED_TEXT)
        await bot.wait_until(lambda: partial(bot.shown(chat)))
        opened = bot.shown(chat)
        # Edited once: grown past what it opened with, not yet whole.
        await bot.wait_until(lambda: bot.shown(chat) != opened)
        first.signal(signal.SIGKILL)
        await first.wait(WAIT_S)
    cut = bot.shown(chat)
    assert partial(cut), f"the kill was meant to cut the stream, the chat shows {cut}"
    restarted = DaemonProcess(directory / "gateway.yaml", env=DAEMON_ENV)
    try:
        await restarted.start()
        await ready(restarted)
        bot = bot_on(restarted)
        await bot.reply_shown(chat, STREAMED_TEXT)
        await bot.barrier(chat)
        assert await restarted.stop_cleanly() == 0
    finally:
        await restarted.stop()
    *reply, _barrier = bot.shown(chat)
    assert reply == [STREAMED_TEXT], f"the reply shows in {len(reply)} messages: {reply}"


def assert_edited_at_the_interval(times: list[float], texts: list[str]) -> None:
    """A streamed reply's first message and its edits: never faster than the profile's edit
    interval, and no edit repeats what the message already showed."""
    assert min(gaps_s(times)) >= EDIT_INTERVAL_S - CLOCK_TOLERANCE_S
    assert no_repeats(texts)


class WaitingFake(Protocol):
    """A platform fake that can wait until what it has seen makes a condition true."""

    async def wait_until(
        self, condition: Callable[[], bool], timeout_s: float = ..., /
    ) -> None: ...


Fake = TypeVar("Fake", bound=WaitingFake)


@dataclass
class WebhookBot(EchoBot[str], Generic[Fake]):
    """An allowed user writes by a webhook posted to the daemon's own HTTP server at `path`
    (LINE, WeCom, the phone platforms); the platform fake sees the bot's replies."""

    fake: Fake
    daemon: DaemonProcess
    #: The webhook path the profile names.
    path: ClassVar[str]

    @property
    def url(self) -> str:
        return self.daemon.http_url + self.path

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        await self.fake.wait_until(condition, WAIT_S)
