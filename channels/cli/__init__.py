"""The terminal channel: lines from stdin in, replies on stdout (streamed in place on a TTY).

On a terminal it shows a prompt and marks each reply, so what the bot says stands apart from
what was typed; piped or redirected, the output is the replies alone, for scripts. `/quit`,
`/exit` or the end of input stops the daemon cleanly.

On a terminal the channel echoes the keys itself (`channels/cli/terminal.py`), so typing never
lands inside a streaming reply: the first key ends the reply's line and opens the prompt below
it; while the user types, the rest of the reply waits, and it is shown above their line when
it ends or once they press Enter. A reply the user stops ("stop", "/stop") ends "(stopped)".
"""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections import deque
from collections.abc import Callable
from typing import TextIO

from bus import Attachment, InboundMessage, InboundSender, OutboundMessage, is_abort_trigger
from channels.cli.terminal import (
    CbreakMode,
    Edit,
    EndOfInput,
    Entered,
    Erased,
    LineEditor,
    Typed,
    display_width,
    terminal_columns,
)
from channels.errors import ChannelError
from channels.lifecycle.run_state import RunStateChannel
from channels.registry import ChannelContext
from channels.split.limits import PLATFORM_LIMITS
from channels.stopping import until_stopped
from config import CliChannelConfig

QUIT_COMMANDS = frozenset({"/quit", "/exit"})
CHAT_ID = "local"
#: How long stopping waits for a paused or slow terminal to take the last of the output.
OUTPUT_FLUSH_S = 5.0
#: On a terminal: the prompt before what the user types, and the mark before each reply.
PROMPT = "\x1b[1;32myou ›\x1b[0m "
REPLY_MARK = "\x1b[1;36mbot ›\x1b[0m "
#: After the text of a reply the user stopped.
STOPPED_MARK = "(stopped)"
#: The command that stops the running reply, besides the abort words ("stop", "cancel"...).
STOP_COMMAND = "/stop"
#: Bytes read from the terminal at once: keys come a few at a time, a paste in one piece.
KEYS_READ_BYTES = 4096


def stops_the_reply(line: str) -> bool:
    words = line.split()
    return is_abort_trigger(line) or (
        bool(words) and words[0].split("@", 1)[0].casefold() == STOP_COMMAND
    )


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


class CliChannel(RunStateChannel):
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
        self._next_id = 0
        self._counter = 0
        # What the screen shows. Keys and replies both change it: one at a time.
        self._screen = asyncio.Lock()
        #: On a terminal: the kernel's echo off, the keys edited here (None elsewhere).
        self._terminal: CbreakMode | None = None
        self._editor: LineEditor | None = None
        #: Lines typed and not yet handed over (a paste brings several at once).
        self._typed_lines: deque[str] = deque()
        #: The prompt (and the line being typed) is the last thing on the screen.
        self._input_shown = False
        #: The streamed reply whose text ends where the cursor is: its line is still open.
        self._open_line: str | None = None
        #: The streamed reply still coming (sent, not finished), if any.
        self._streaming: str | None = None
        #: What the screen shows of each streamed reply, and its newest text (ahead of it
        #: while the user types).
        self._shown: dict[str, str] = {}
        self._latest: dict[str, str] = {}
        #: Replies the user stopped: their late snapshots are not shown.
        self._stopped_replies: set[str] = set()
        super().__init__()

    def supports_edit(self) -> bool:
        return self._stdout.isatty()

    @property
    def _decorated(self) -> bool:
        return self._stdout.isatty()

    @property
    def _echoes(self) -> bool:
        return self._terminal is not None and self._terminal.echoes

    @property
    def _user_typing(self) -> bool:
        """A line is being typed, and shown: replies wait rather than write over it."""
        return (
            self._echoes
            and self._input_shown
            and self._editor is not None
            and bool(self._editor.line)
        )

    def _mark(self) -> str:
        return REPLY_MARK if self._decorated else ""

    async def start(self, inbound: InboundSender) -> None:
        await self._run_state.run(self._read(inbound))

    async def _read(self, inbound: InboundSender) -> None:
        """Hand each line typed to the gateway until the end of input or `stop()`."""
        await self._output.open()
        self._enter_cbreak_mode()
        if self._decorated:
            await self._write(PROMPT)
            self._input_shown = True
        source = await _line_source(self._stdin)
        self._run_state.receiving.set()
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
        await self._run_state.stopping.wait()

    def _enter_cbreak_mode(self) -> None:
        """Edit the keys here when both ends are a terminal (see the module's docstring)."""
        if self._terminal is not None or not (self._decorated and self._stdin.isatty()):
            return
        try:
            terminal = CbreakMode(self._stdin.fileno())
            terminal.enter()
        except (OSError, ValueError):
            return  # not a terminal after all: lines as the kernel edits them
        self._terminal = terminal
        self._editor = LineEditor(terminal.control_chars)

    async def _next_line(self, source: _LineSource | None) -> str | None:
        """The next line typed ("" at the end of input), or None once `stop()` was called."""
        if self._run_state.stopping.is_set():
            return None
        if source is None:
            return await asyncio.to_thread(self._stdin.readline)  # a file: never waits long
        if self._editor is None:
            line = await until_stopped(
                source[0].readline(), self._run_state.stopping, name="cli-read-line"
            )
            self._input_shown = False  # the reply comes after the line the kernel echoed
            return None if line is None else line.decode(errors="replace")
        while not self._typed_lines:
            keys = await until_stopped(
                source[0].read(KEYS_READ_BYTES), self._run_state.stopping, name="cli-read-keys"
            )
            if keys is None:
                return None
            if not keys:
                return ""  # the terminal is gone
            for edit in self._editor.feed(keys):
                await self._show_edit(edit)
        return self._typed_lines.popleft()

    async def stop(self) -> None:
        # The output is closed first: a write waiting on a paused terminal must not hold up
        # `start()`, which `super().stop()` waits for.
        self._run_state.stopping.set()
        await self._output.close()
        if self._terminal is not None:
            # The terminal is shared with the shell that started us: leave it as we found it.
            self._terminal.restore()
            self._terminal = None
        await super().stop()

    async def _write(self, text: str) -> None:
        await self._output.write(text)

    # The screen: the user's line and the replies, never on one line.

    async def _show_edit(self, edit: Edit) -> None:
        async with self._screen:
            if isinstance(edit, Typed):
                if self._echoes and self._input_shown:
                    await self._write(edit.text)
                elif self._echoes:
                    await self._show_input()
            elif isinstance(edit, Erased):
                if self._echoes and self._input_shown:
                    await self._erase_input(edit.text)
                    await self._write(PROMPT + self._input_text())
                await self._catch_up()
            elif isinstance(edit, Entered):
                await self._enter(edit.line)
            elif isinstance(edit, EndOfInput):
                if self._echoes and self._input_shown:
                    await self._write("\n")
                self._typed_lines.append("")

    async def _enter(self, line: str) -> None:
        if not line.strip():
            return  # an empty Enter neither sends nor moves anything
        if self._input_shown and self._echoes:
            await self._write("\n")
        # Without the echo the prompt stays as it is, and the reply follows it.
        self._input_shown = False
        if stops_the_reply(line) and self._streaming is not None:
            await self._mark_stopped(self._streaming)
        await self._catch_up()
        self._typed_lines.append(line + "\n")

    def _input_text(self) -> str:
        return self._editor.line if self._echoes and self._editor is not None else ""

    async def _show_input(self) -> None:
        """The prompt and the line being typed, on a line of their own."""
        if self._open_line is not None:
            await self._write("\n")
            self._open_line = None
        await self._write(PROMPT + self._input_text())
        self._input_shown = True

    async def _erase_input(self, erased: str = "") -> None:
        """Take the prompt and the typed line (with `erased`, gone from it) off the screen."""
        width = display_width(PROMPT) + display_width(self._input_text() + erased)
        columns = terminal_columns(self._terminal_fd())
        rows_up = max(0, width - 1) // columns
        await self._write((f"\x1b[{rows_up}A" if rows_up else "") + "\r\x1b[J")

    def _terminal_fd(self) -> int:
        try:
            return self._stdout.fileno()
        except (AttributeError, OSError, ValueError):
            return -1

    async def _free_line(self) -> None:
        """The cursor at the start of a line of its own, for a reply."""
        if self._input_shown and self._decorated:
            await self._erase_input()
            self._input_shown = False
        elif self._open_line is not None:
            await self._write("\n")
            self._open_line = None

    async def _prompt_again(self) -> None:
        """After a reply: its line ended, the prompt and what was being typed below it."""
        if self._open_line is not None:
            await self._write("\n")
            self._open_line = None
        if self._decorated and not self._input_shown:
            await self._write(PROMPT + self._input_text())
            self._input_shown = True

    async def _show_reply(self, reply: str, content: str) -> None:
        """The reply's text on screen: grown in place while its line is open, else on a line
        of its own (the rest of it, if the user's typing cut it, or all of it if it changed)."""
        shown = self._shown.get(reply, "")
        if self._open_line == reply and content.startswith(shown):
            await self._write(content[len(shown) :])
        elif content != shown:
            rest = content[len(shown) :] if shown and content.startswith(shown) else content
            await self._free_line()
            await self._write(self._mark() + rest)
            self._open_line = reply
        self._shown[reply] = content

    async def _catch_up(self) -> None:
        """Show what the streaming reply said while the user typed."""
        reply = self._streaming
        if reply is None or self._user_typing:
            return
        latest = self._latest.get(reply)
        if latest is not None:
            await self._show_reply(reply, latest)

    async def _mark_stopped(self, reply: str) -> None:
        latest = self._latest.get(reply, "")
        if self._open_line != reply and latest == self._shown.get(reply, ""):
            await self._free_line()
            await self._write(self._mark() + STOPPED_MARK + "\n")
        else:
            await self._show_reply(reply, latest)
            space = "" if latest[-1:].isspace() else " "
            await self._write(space + STOPPED_MARK + "\n")
        self._open_line = None
        self._forget(reply)
        self._stopped_replies.add(reply)

    def _forget(self, reply: str) -> None:
        self._shown.pop(reply, None)
        self._latest.pop(reply, None)
        if self._streaming == reply:
            self._streaming = None

    # The channel's side: replies, whole or streamed.

    async def send(self, message: OutboundMessage) -> None:
        async with self._screen:
            await self._free_line()
            await self._write(self._mark() + message.content + "\n")
            self._input_shown = False
            await self._prompt_again()

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """A reply's file, by its path: the terminal runs where the file is."""
        shown = f" ({attachment.caption})" if attachment.caption else ""
        line = f"[{attachment.kind}: {attachment.path}{shown}]"
        await self.send(OutboundMessage(channel=self.name, chat_id=chat_id, content=line))
        return None

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        self._next_id += 1
        reply = str(self._next_id)
        async with self._screen:
            if self._streaming is not None:
                # A newer message interrupted it: that reply will not be finished.
                self._forget(self._streaming)
            self._streaming = reply
            self._latest[reply] = message.content
            if not self._user_typing:
                await self._show_reply(reply, message.content)
        return reply

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        async with self._screen:
            if message_id not in self._latest:
                return  # stopped, or interrupted by a newer reply: its late snapshots go
            self._latest[message_id] = content
            if not self._user_typing:
                await self._show_reply(message_id, content)

    async def finish_stream(self, chat_id: str, message_id: str, content: str) -> None:
        async with self._screen:
            if message_id in self._stopped_replies:
                # It ended before the stop reached it: all of it, on a line of its own.
                self._stopped_replies.discard(message_id)
                self._shown.pop(message_id, None)
            await self._show_reply(message_id, content)
            await self._prompt_again()
            self._forget(message_id)


def create(config: CliChannelConfig, context: ChannelContext) -> CliChannel:
    return CliChannel(context.request_shutdown)
