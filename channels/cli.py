"""The terminal channel: lines from stdin in, replies on stdout (streamed in place on a TTY).

On a terminal it shows a prompt and marks each reply, so what the bot says stands apart from
what was typed; piped or redirected, the output is the replies alone, for scripts. `/quit`,
`/exit` or the end of input stops the daemon cleanly.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections.abc import Callable
from typing import TextIO

from bus import InboundMessage, InboundSender, OutboundMessage
from channels.base import Channel
from channels.errors import ChannelError
from channels.limits import PLATFORM_LIMITS
from channels.registry import ChannelContext
from channels.stopping import until_stopped
from config import CliChannelConfig

QUIT_COMMANDS = frozenset({"/quit", "/exit"})
CHAT_ID = "local"
#: How long stopping waits for a paused or slow terminal to take the last of the output.
OUTPUT_FLUSH_S = 5.0
#: On a terminal: the prompt before what the user types, and the mark before each reply.
PROMPT = "\x1b[1;32myou ›\x1b[0m "
REPLY_MARK = "\x1b[1;36mbot ›\x1b[0m "


_LineSource = tuple[asyncio.StreamReader, asyncio.BaseTransport]


async def _line_source(stream: TextIO) -> _LineSource | None:
    """A non-blocking reader over stdin when it is a pipe or a terminal; None for a file.

    It reads a duplicate of the descriptor, so closing its transport leaves sys.stdin open.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        pipe = os.fdopen(os.dup(stream.fileno()), "rb", buffering=0)
    except (AttributeError, OSError, ValueError):
        return None  # not backed by a file descriptor (tests hand in a StringIO)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except (ValueError, OSError):
        pipe.close()
        return None
    return reader, transport


class _WriteFlow(asyncio.Protocol):
    """Flow control of the stdout transport: writers wait while the terminal is not reading."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = asyncio.Event()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        self.writable.set()


class _Output:
    """Text to stdout that neither blocks the event loop nor gets lost.

    On a terminal, stdin and stdout are one open file, so reading stdin without blocking makes
    stdout non-blocking too: a plain write to a slow or paused (Ctrl-S) terminal then fails, or
    with PYTHONUNBUFFERED drops the text silently. A write transport buffers and waits instead.
    A regular file (output redirected to one) never blocks and is written directly.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._transport: asyncio.WriteTransport | None = None
        self._flow = _WriteFlow()
        self._restore_blocking: int | None = None

    async def open(self) -> None:
        if self._transport is not None and not self._flow.closed.is_set():
            return
        self._transport = None
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            return  # not backed by a file descriptor (tests hand in a StringIO)
        self._stream.flush()
        was_blocking = os.get_blocking(fd)
        # A duplicate, so closing the transport leaves sys.stdout itself open.
        pipe = os.fdopen(os.dup(fd), "wb", buffering=0)
        self._flow = _WriteFlow()
        flow = self._flow
        try:
            transport, _ = await asyncio.get_running_loop().connect_write_pipe(lambda: flow, pipe)
        except (ValueError, OSError):
            pipe.close()
            return
        self._transport = transport
        self._restore_blocking = fd if was_blocking else None

    async def write(self, text: str) -> None:
        if self._transport is None:
            self._stream.write(text)
            self._stream.flush()
            return
        if self._flow.closed.is_set():
            # Not worth retrying: whatever read our output has closed it.
            raise ChannelError("stdout is closed: the terminal or pipe is gone", channel="cli")
        # Wait before writing, not after: a write that times out here was never shown, so
        # the retry that follows does not print it twice.
        await self._flow.writable.wait()
        self._transport.write(text.encode(self._encoding, errors="replace"))
        if self._transport.is_closing():
            # The write itself found the reader gone: the text was not shown.
            raise ChannelError("stdout is closed: the terminal or pipe is gone", channel="cli")

    async def close(self) -> None:
        transport, self._transport = self._transport, None
        if transport is None:
            return
        transport.close()  # sends what is buffered first
        try:
            async with asyncio.timeout(OUTPUT_FLUSH_S):
                await self._flow.closed.wait()
        except TimeoutError:
            transport.abort()
        finally:
            # The terminal is shared with the shell that started us: leave it as we found it.
            if self._restore_blocking is not None:
                os.set_blocking(self._restore_blocking, True)
                self._restore_blocking = None


class CliChannel(Channel):
    name = "cli"
    limit = PLATFORM_LIMITS["cli"]
    edit_interval_s = 0.05
    #: An edit redraws the terminal: the final needs no slot.
    edits_rate_limited = False
    send_with_id_sends_whole = False  # it shows a streamed reply, without the prompt after it

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
        self._output = _Output(self._stdout)
        self._user = getpass.getuser()
        self._shown: dict[str, str] = {}
        self._next_id = 0
        self._counter = 0
        self._stopped = asyncio.Event()

    def supports_edit(self) -> bool:
        return self._stdout.isatty()

    @property
    def _decorated(self) -> bool:
        return self._stdout.isatty()

    def _mark(self) -> str:
        return REPLY_MARK if self._decorated else ""

    def _after_reply(self) -> str:
        return "\n" + PROMPT if self._decorated else "\n"

    async def start(self, inbound: InboundSender) -> None:
        await self._output.open()
        if self._decorated:
            await self._write(PROMPT)
        source = await _line_source(self._stdin)
        try:
            while (raw := await self._next_line(source)) is not None:
                line = raw.strip()
                if not raw or line.lower() in QUIT_COMMANDS:
                    self._on_quit()
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
        finally:
            if source is not None:
                source[1].close()
        # The daemon is shutting down; wait here to be stopped rather than be restarted.
        await self._stopped.wait()

    async def _next_line(self, source: _LineSource | None) -> str | None:
        """The next line typed ("" at the end of input), or None once `stop()` was called."""
        if self._stopped.is_set():
            return None
        if source is None:
            return await asyncio.to_thread(self._stdin.readline)  # a file: never waits long
        line = await until_stopped(source[0].readline(), self._stopped, name="cli-read-line")
        return None if line is None else line.decode(errors="replace")

    async def stop(self) -> None:
        self._stopped.set()
        await self._output.close()

    async def _write(self, text: str) -> None:
        await self._output.write(text)

    async def send(self, message: OutboundMessage) -> None:
        await self._write(self._mark() + message.content + self._after_reply())

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        self._next_id += 1
        message_id = str(self._next_id)
        self._shown[message_id] = message.content
        await self._write(self._mark() + message.content)
        return message_id

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        shown = self._shown.get(message_id, "")
        if content.startswith(shown):
            await self._write(content[len(shown) :])
        else:
            # The text changed, not only grew: show the new version on a fresh line.
            await self._write("\n" + self._mark() + content)
        self._shown[message_id] = content

    async def finish_stream(self, chat_id: str, message_id: str, content: str) -> None:
        await self.edit_message(chat_id, message_id, content)
        self._shown.pop(message_id, None)
        await self._write(self._after_reply())


def create(config: CliChannelConfig, context: ChannelContext) -> CliChannel:
    return CliChannel(context.request_shutdown)
