"""The terminal channel (`type: cli`) through the real daemon subprocess.

Lines go in on stdin, replies come out on stdout, logs (JSON) on stderr. With pipes the reply
is printed whole; on a terminal (a pseudo-terminal here) it grows in place.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import struct
import sys
import termios
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from channels.cli import PROMPT as CLI_PROMPT
from channels.cli import REPLY_MARK
from tests.support.daemon import REPO_ROOT, WAIT_S, write_config
from tests.support.screen import screen_lines

pytestmark = pytest.mark.slow

Predicate = Callable[[bytes], bool]
#: What a terminal user types to pause and resume the output (flow control: Ctrl-S, Ctrl-Q).
STOP_OUTPUT = b"\x13"
START_OUTPUT = b"\x11"
PROMPT = CLI_PROMPT.encode()
MARK = REPLY_MARK.encode()
#: The pseudo-terminal's size, as a terminal window has one.
SCREEN_ROWS, SCREEN_COLUMNS = 40, 100
#: The prompt and the reply mark as the screen shows them.
YOU, BOT = "you › ", "bot › "


def terminal_profile(*, delay_s: float = 0.0, pieces: int = 3) -> str:
    return f"""\
agent: {{type: echo, delay_s: {delay_s}, pieces: {pieces}}}
channels:
  - type: cli
"""


class OutputRecorder(asyncio.Protocol):
    """Everything a process writes on one stream, and every state the stream went through."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.states: list[bytes] = []
        self.closed = asyncio.Event()
        self._changed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.states.append(bytes(self.data))
        self._changed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        # A pseudo-terminal's master reports EIO once the child has gone: that is its EOF.
        self.closed.set()
        self._changed.set()

    async def wait_for(self, predicate: Predicate, timeout_s: float = WAIT_S) -> bytes:
        async with asyncio.timeout(timeout_s):
            while not predicate(bytes(self.data)):
                if self.closed.is_set():
                    raise AssertionError(f"the stream ended; it said {bytes(self.data)!r}")
                self._changed.clear()
                await self._changed.wait()
        return bytes(self.data)

    async def shows(self, expected: bytes) -> bytes:
        return await self.wait_for(lambda data: expected in data)


async def record(fd: int) -> tuple[OutputRecorder, asyncio.ReadTransport]:
    """Reads `fd` (a pipe or a pty master) on the event loop; the recorder owns it after this."""
    recorder = OutputRecorder()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: recorder, os.fdopen(fd, "rb", buffering=0)
    )
    return recorder, transport


@dataclass
class Terminal:
    """The daemon with its standard streams in the test's hands."""

    process: asyncio.subprocess.Process
    stdout: OutputRecorder
    stderr: OutputRecorder
    write_input: Callable[[bytes], Awaitable[None]]
    end_input: Callable[[], Awaitable[None]]
    transports: list[asyncio.BaseTransport] = field(default_factory=list)
    on_close: list[Callable[[], None]] = field(default_factory=list)

    async def type_line(self, line: str) -> None:
        await self.write_input(line.encode() + b"\n")

    async def exit_code(self) -> int:
        code = await asyncio.wait_for(self.process.wait(), WAIT_S)
        await asyncio.wait_for(self.stdout.closed.wait(), WAIT_S)
        await asyncio.wait_for(self.stderr.closed.wait(), WAIT_S)
        return code

    def log_events(self) -> list[dict[str, Any]]:
        lines = bytes(self.stderr.data).decode().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
        for transport in self.transports:
            transport.close()
        for release in self.on_close:
            release()


async def spawn(
    config: Path, *, stdin: int, stdout: int, stderr: int
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "run",
        "-c",
        str(config),
        cwd=config.parent,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )


async def start_piped(config: Path) -> Terminal:
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        process = await spawn(
            config, stdin=asyncio.subprocess.PIPE, stdout=out_write, stderr=err_write
        )
    finally:
        os.close(out_write)
        os.close(err_write)
    stdout, stdout_transport = await record(out_read)
    stderr, stderr_transport = await record(err_read)
    stdin = process.stdin
    assert stdin is not None

    async def write_input(data: bytes) -> None:
        stdin.write(data)
        await asyncio.wait_for(stdin.drain(), WAIT_S)

    async def end_input() -> None:
        stdin.close()
        await asyncio.wait_for(stdin.wait_closed(), WAIT_S)

    return Terminal(
        process, stdout, stderr, write_input, end_input, [stdout_transport, stderr_transport]
    )


async def start_on_terminal(config: Path, *, echo: bool = False) -> Terminal:
    """stdin and stdout on one pseudo-terminal, as in a terminal window; stderr on a pipe.

    Without `echo` the master shows only what the daemon prints; with it, also what was typed,
    as a terminal window does.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SCREEN_ROWS, SCREEN_COLUMNS, 0, 0))
    attributes = termios.tcgetattr(slave)
    if not echo:
        attributes[3] &= ~termios.ECHO
    termios.tcsetattr(slave, termios.TCSANOW, attributes)
    end_of_file: bytes = attributes[6][termios.VEOF]  # Ctrl-D
    err_read, err_write = os.pipe()
    try:
        process = await spawn(config, stdin=slave, stdout=slave, stderr=err_write)
    finally:
        os.close(slave)
        os.close(err_write)
    # Typing goes through a duplicate of the master, which the recorder reads and closes.
    typing_fd = os.dup(master)
    stdout, stdout_transport = await record(master)
    stderr, stderr_transport = await record(err_read)

    async def write_input(data: bytes) -> None:
        os.write(typing_fd, data)

    async def end_input() -> None:
        os.write(typing_fd, end_of_file)

    terminal = Terminal(
        process, stdout, stderr, write_input, end_input, [stdout_transport, stderr_transport]
    )
    terminal.on_close.append(lambda: os.close(typing_fd))
    return terminal


def stored_messages(data_dir: Path) -> list[tuple[str, str]]:
    """(role, content) of every message in every session file under `data_dir`."""
    messages: list[tuple[str, str]] = []
    for path in sorted(data_dir.rglob("*.jsonl")):
        _meta, *lines = path.read_text().splitlines()
        for line in lines:
            message = json.loads(line)
            messages.append((message["role"], message["content"]))
    return messages


@pytest.fixture
async def piped(tmp_path: Path) -> AsyncIterator[Terminal]:
    terminal = await start_piped(write_config(tmp_path, {"term": terminal_profile()}))
    try:
        yield terminal
    finally:
        await terminal.close()


async def test_lines_in_replies_out_and_quit_exits_cleanly(piped: Terminal) -> None:
    await piped.type_line("hello terminal")
    await piped.stdout.shows(b"hello terminal\n")
    await piped.type_line("/help")
    await piped.stdout.shows(b"/help")
    await piped.type_line("a second line")
    await piped.stdout.shows(b"a second line\n")
    await piped.type_line("/quit")

    assert await piped.exit_code() == 0
    shown = bytes(piped.stdout.data).decode()
    assert shown.startswith("hello terminal\n")
    assert "/new" in shown
    assert shown.endswith("a second line\n")
    assert '"event"' not in shown  # logs never reach stdout
    events = piped.log_events()  # every stderr line is a JSON object
    assert "daemon.stopped" in [event["event"] for event in events]
    assert [event for event in events if event.get("level") in {"error", "critical"}] == []


async def test_end_of_input_stops_the_daemon_and_keeps_the_session(
    piped: Terminal, tmp_path: Path
) -> None:
    await piped.type_line("remember me")
    await piped.stdout.shows(b"remember me\n")
    await piped.end_input()

    assert await piped.exit_code() == 0
    assert stored_messages(tmp_path / "data") == [
        ("user", "remember me"),
        ("assistant", "remember me"),
    ]


async def test_a_script_piped_in_is_answered_before_the_daemon_exits(piped: Terminal) -> None:
    await piped.write_input(b"first question\nsecond question\n/quit\n")

    assert await piped.exit_code() == 0
    shown = bytes(piped.stdout.data).decode()
    assert "first question" in shown
    assert "second question" in shown


async def test_on_a_terminal_the_reply_grows_in_place(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"term": terminal_profile(delay_s=0.3, pieces=4)})
    terminal = await start_on_terminal(config)
    text = "the quick brown fox jumps over the lazy dog"
    try:
        await terminal.type_line(text)
        # The terminal driver turns the final newline into CR LF; then the prompt is back.
        shown = await terminal.stdout.wait_for(lambda data: data.endswith(b"\r\n" + PROMPT))
        # The final text once, marked as the bot's: grown, never reprinted.
        assert shown == PROMPT + MARK + text.encode() + b"\r\n" + PROMPT
        head = PROMPT + MARK
        growing = [
            state
            for state in terminal.stdout.states
            if state.startswith(head)
            and 0 < len(state) - len(head) < len(text)
            and text.encode().startswith(state[len(head) :])
        ]
        assert growing, terminal.stdout.states

        await terminal.end_input()
        assert await terminal.exit_code() == 0
    finally:
        await terminal.close()


async def test_a_paused_terminal_gets_the_whole_reply_once_resumed(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"term": terminal_profile(delay_s=0.2, pieces=4)})
    terminal = await start_on_terminal(config)
    text = "every word of this reply arrives after ctrl-q"
    try:
        # Ctrl-S stops the terminal's output before the line is read; the daemon must wait
        # for it rather than fail or drop text (stdout is non-blocking: it shares stdin's file).
        await terminal.write_input(STOP_OUTPUT + text.encode() + b"\n")
        await terminal.stderr.shows(b'"turn.done"')
        assert bytes(terminal.stdout.data) in (b"", PROMPT)

        await terminal.write_input(START_OUTPUT)
        shown = await terminal.stdout.wait_for(lambda data: data.endswith(b"\r\n" + PROMPT))
        assert shown == PROMPT + MARK + text.encode() + b"\r\n" + PROMPT
        await terminal.end_input()
        assert await terminal.exit_code() == 0
    finally:
        await terminal.close()


async def test_replies_redirected_to_a_file_are_written_whole(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"term": terminal_profile()})
    transcript = tmp_path / "transcript.txt"
    err_read, err_write = os.pipe()
    with transcript.open("wb") as sink:
        try:
            process = await spawn(
                config, stdin=asyncio.subprocess.PIPE, stdout=sink.fileno(), stderr=err_write
            )
        finally:
            os.close(err_write)
    stderr, stderr_transport = await record(err_read)
    try:
        assert process.stdin is not None
        process.stdin.write(b"into the file\n")
        await process.stdin.drain()
        await stderr.shows(b'"turn.done"')
        process.stdin.write(b"/quit\n")
        await process.stdin.drain()
        assert await asyncio.wait_for(process.wait(), WAIT_S) == 0
        assert transcript.read_text() == "into the file\n"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stdin is not None:
            process.stdin.close()
        stderr_transport.close()


async def test_on_a_terminal_logs_go_to_a_file_not_into_the_chat(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"term": terminal_profile()})
    master, slave = pty.openpty()
    attributes = termios.tcgetattr(slave)
    attributes[3] &= ~termios.ECHO
    termios.tcsetattr(slave, termios.TCSANOW, attributes)
    try:
        process = await spawn(config, stdin=slave, stdout=slave, stderr=slave)
    finally:
        os.close(slave)
    typing_fd = os.dup(master)
    screen, transport = await record(master)
    try:
        await screen.shows(b"logs go to ")
        await screen.shows(PROMPT)
        os.write(typing_fd, b"hello there\n")
        await screen.shows(MARK + b"hello there\r\n" + PROMPT)
        os.write(typing_fd, b"/quit\n")
        assert await asyncio.wait_for(process.wait(), WAIT_S) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        transport.close()
        os.close(typing_fd)
    shown = bytes(screen.data).decode()
    assert '"event"' not in shown
    log_file = tmp_path / "data" / "octos-gateway.log"
    assert str(log_file) in shown
    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert events[-1]["event"] == "daemon.stopped"


async def test_on_a_terminal_a_data_dir_that_is_a_file_is_one_line_and_exit_73(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, {"term": terminal_profile()})
    (tmp_path / "data").write_text("not a directory\n")
    master, slave = pty.openpty()
    try:
        process = await spawn(config, stdin=slave, stdout=slave, stderr=slave)
    finally:
        os.close(slave)
    screen, transport = await record(master)
    try:
        assert await asyncio.wait_for(process.wait(), WAIT_S) == 73
        await screen.shows(b"--data-dir")
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        transport.close()
    shown = bytes(screen.data).decode()
    assert f"error: cannot use the data directory {tmp_path / 'data'}" in shown
    assert "Traceback" not in shown


def words(count: int) -> str:
    return " ".join(f"w{n}" for n in range(count))


def shown_on_screen(terminal: Terminal) -> list[str]:
    return screen_lines(bytes(terminal.stdout.data), SCREEN_COLUMNS)


def screen_ends_with(*lines: str) -> Predicate:
    expected = list(lines)
    return lambda data: screen_lines(data, SCREEN_COLUMNS)[-len(expected) :] == expected


async def test_typing_while_a_reply_streams_gets_a_line_of_its_own(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"term": terminal_profile(delay_s=0.3, pieces=8)})
    terminal = await start_on_terminal(config, echo=True)
    text = words(16)
    try:
        # Keys typed before the channel runs are the kernel's to echo: wait for the prompt.
        await terminal.stdout.shows(PROMPT)
        await terminal.write_input(text.encode() + b"\r")
        await terminal.stdout.shows(MARK + b"w0")
        # Typed while the reply streams: the reply's line ends, the typing goes below it.
        await terminal.write_input(b"helo\x7fl")
        await terminal.stdout.wait_for(screen_ends_with(YOU + "hell"))
        await terminal.write_input(b"o")
        # The rest of the reply waited, and is shown above the line being typed once it ends.
        await terminal.stdout.wait_for(
            lambda data: (
                screen_lines(data, SCREEN_COLUMNS)[-2:][0].endswith(" w15")
                and screen_lines(data, SCREEN_COLUMNS)[-1] == YOU + "hello"
            )
        )
        await terminal.write_input(b"\r")
        await terminal.stdout.wait_for(screen_ends_with(YOU + "hello", BOT + "hello", YOU))

        lines = shown_on_screen(terminal)
        assert lines[0] == YOU + text
        cut_reply = lines[1:-3]
        assert [line[: len(BOT)] for line in cut_reply] == [BOT, BOT], lines
        assert "".join(line[len(BOT) :] for line in cut_reply) == text, lines
        await terminal.end_input()
        assert await terminal.exit_code() == 0
    finally:
        await terminal.close()


@pytest.mark.parametrize("echo", [True, False], ids=["echo", "no-echo"])
async def test_a_reply_the_user_stops_ends_stopped(tmp_path: Path, echo: bool) -> None:
    config = write_config(tmp_path, {"term": terminal_profile(delay_s=0.3, pieces=20)})
    terminal = await start_on_terminal(config, echo=echo)
    text = words(20)
    try:
        await terminal.stdout.shows(PROMPT)
        await terminal.write_input(text.encode() + b"\r")
        await terminal.stdout.shows(MARK + b"w0")
        await terminal.write_input(b"stop\r")
        await terminal.stdout.wait_for(screen_ends_with(BOT + "🛑 Cancelled.", YOU))
        # A message after it is answered, and nothing of the stopped reply comes after.
        await terminal.write_input(b"after\r")
        # (Without the echo, a reply follows the prompt it was typed at.)
        answered = BOT + "after" if echo else YOU + BOT + "after"
        await terminal.stdout.wait_for(screen_ends_with(answered, YOU))

        lines = shown_on_screen(terminal)
        stopped = [n for n, line in enumerate(lines) if line.endswith("(stopped)")]
        assert len(stopped) == 1, lines
        assert lines[stopped[0] + 1] == BOT + "🛑 Cancelled.", lines
        assert not [line for line in lines if BOT in line and "w19" in line], lines
        if echo:
            assert lines[0] == YOU + text
            assert YOU + "stop" in lines
            assert lines[stopped[0]].startswith(BOT)
        else:
            # Typed unseen: the reply's line was never cut, and ends with the mark.
            assert lines[0].startswith(YOU + BOT + "w0 "), lines
            assert lines[0].endswith(" (stopped)"), lines
        await terminal.end_input()
        assert await terminal.exit_code() == 0
    finally:
        await terminal.close()
