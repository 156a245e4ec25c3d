"""The terminal channel: lines from stdin in, replies on stdout (streamed in place on a TTY).

`/quit`, `/exit` or the end of input stops the daemon cleanly.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from collections.abc import Callable
from typing import TextIO

from bus import InboundMessage, InboundSender, OutboundMessage
from channels.base import Channel
from channels.limits import PLATFORM_LIMITS
from channels.registry import ChannelContext
from config import CliChannelConfig

QUIT_COMMANDS = frozenset({"/quit", "/exit"})
CHAT_ID = "local"


async def _line_source(stream: TextIO) -> asyncio.StreamReader | None:
    """A non-blocking reader over stdin when it is a pipe or a terminal; None for a file."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
    except (ValueError, OSError):
        return None
    return reader


class CliChannel(Channel):
    limit = PLATFORM_LIMITS["cli"]
    edit_interval_s = 0.05

    def __init__(
        self,
        on_quit: Callable[[], None],
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
    ) -> None:
        self._on_quit = on_quit
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._user = getpass.getuser()
        self._shown: dict[str, str] = {}
        self._next_id = 0
        self._counter = 0
        self._stopped = asyncio.Event()

    @property
    def name(self) -> str:
        return "cli"

    def supports_edit(self) -> bool:
        return self._stdout.isatty()

    async def start(self, inbound: InboundSender) -> None:
        reader = await _line_source(self._stdin)
        while True:
            if reader is not None:
                raw = (await reader.readline()).decode(errors="replace")
            else:
                raw = await asyncio.to_thread(self._stdin.readline)
            line = raw.strip()
            if not raw or line.lower() in QUIT_COMMANDS:
                break
            if not line:
                continue
            self._counter += 1
            await inbound.send(
                InboundMessage(
                    channel="cli",
                    sender_id=self._user,
                    chat_id=CHAT_ID,
                    content=line,
                    message_id=str(self._counter),
                )
            )
        self._on_quit()
        # The daemon is shutting down; wait here to be stopped rather than be restarted.
        await self._stopped.wait()

    async def stop(self) -> None:
        self._stopped.set()

    def _write(self, text: str) -> None:
        self._stdout.write(text)
        self._stdout.flush()

    async def send(self, message: OutboundMessage) -> None:
        self._write(message.content + "\n")

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        self._next_id += 1
        message_id = str(self._next_id)
        self._shown[message_id] = message.content
        self._write(message.content)
        return message_id

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        shown = self._shown.get(message_id, "")
        if content.startswith(shown):
            self._write(content[len(shown) :])
        else:
            # The text changed, not only grew: show the new version on a fresh line.
            self._write("\n" + content)
        self._shown[message_id] = content

    async def finish_stream(self, chat_id: str, message_id: str, content: str) -> None:
        await self.edit_message(chat_id, message_id, content)
        self._shown.pop(message_id, None)
        self._write("\n")


def create(config: CliChannelConfig, context: ChannelContext) -> CliChannel:
    return CliChannel(context.request_shutdown)
