"""`FileCreator`: many new chats' session files made at once by a helper process.

A new chat's file is three new inodes (its chat's directory, that directory's `sessions/` and
the file) and four system calls (two mkdirs, the open, the first write). The disk writer thread
could make them itself, but each of its system calls gives up the interpreter's lock and must
take it back on its way out, which waits for the event loop to let go of it: while the loop is
busy (a burst of new chats is exactly when it is) the writer makes a few hundred files a second
and the rest wait for the journal's next checkpoint, which waits for them. The helper makes a
whole batch of files with no lock to wait for, on another core, while the loop goes on; the
writer thread waits once per batch, for its answer.

The helper is a small Python program with no imports beyond `os`, `struct` and `sys`, started
with the daemon's interpreter once the first large batch of new chats comes. It reads batches
on its standard input and answers each on its standard output:

    batch:  count (u32), then per file: path length (u32), data length (u32), path, data
    answer: per file: errno (i32, 0 when made), whether a partial write was left (u8)

For each file it makes the two directories (existing ones are fine), creates the file
exclusively (an existing file is refused, never written into), writes the data (the meta line
and the first lines) and closes it. A write that fails is undone down to an empty file, which a
reader takes for no session. It exits at the end of its input: when the store stops, or when
the daemon dies and the pipe closes. Nothing here syncs: the store's next sync makes the files
and their directory entries durable, as for the files the writer makes itself.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import structlog

log = structlog.get_logger(__name__)

#: A batch with at least this many new files goes to the helper; fewer are made by the writer
#: thread itself (one new chat now and then costs it little; the helper's round trip and the
#: process it needs are worth it for a burst).
HELPER_FROM_FILES = 8

_COUNT = struct.Struct("<I")
_ITEM = struct.Struct("<II")
_ANSWER = struct.Struct("<iB")

_HELPER_SOURCE = r"""
import os, struct, sys

COUNT, ITEM, ANSWER = struct.Struct("<I"), struct.Struct("<II"), struct.Struct("<iB")
FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
source, answers = sys.stdin.buffer, sys.stdout.buffer


def read(size):
    data = source.read(size)
    if len(data) < size:
        raise SystemExit(0)  # the store stopped, or the daemon died
    return data


def make_directories(sessions):
    chat = os.path.dirname(sessions)
    try:
        os.mkdir(chat)
    except FileNotFoundError:  # the first chat of all: users/ is new too
        os.makedirs(sessions, exist_ok=True)
        return
    except FileExistsError:
        pass  # the chat talked before (another topic): its directory is there
    try:
        os.mkdir(sessions)
    except FileExistsError:
        pass  # made by an earlier topic of the chat


def make(path, data):
    make_directories(os.path.dirname(path))
    fd = os.open(path, FLAGS, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as error:
        try:
            os.ftruncate(fd, 0)
        except OSError:
            return error.errno or 5, 1
        return error.errno or 5, 0
    finally:
        os.close(fd)
    return 0, 0


while True:
    (count,) = COUNT.unpack(read(COUNT.size))
    out = bytearray()
    for _ in range(count):
        path_size, data_size = ITEM.unpack(read(ITEM.size))
        path, data = read(path_size), read(data_size)  # the path as bytes, as it was given
        try:
            code, partial = make(path, data)
        except OSError as error:
            code, partial = error.errno or 5, 0
        out += ANSWER.pack(code, partial)
    answers.write(out)
    answers.flush()
"""


class CreatorGone(Exception):
    """The helper could not be started, or stopped answering: make the files in-process."""


class Made:
    """What the helper did with one file: `error` None when it was made with its data;
    `partial` when a failed write could not be undone (part of the data is in the file)."""

    __slots__ = ("error", "partial")

    def __init__(self, error: OSError | None, partial: bool) -> None:
        self.error = error
        self.partial = partial


class FileCreator:
    """The helper process, used by the writer thread alone (blocking)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @classmethod
    def started(cls) -> FileCreator:
        try:
            process = subprocess.Popen(
                # -I -S: no site, no user paths, no environment variables; it needs none.
                [sys.executable, "-I", "-S", "-c", _HELPER_SOURCE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as error:
            raise CreatorGone(f"the file creator could not start: {error!r}") from error
        return cls(process)

    def make(self, files: Sequence[tuple[Path, bytes]]) -> list[Made]:
        """Make each file with its data; raises CreatorGone if the helper died meanwhile (which
        of the files it made is then unknown)."""
        request = bytearray(_COUNT.pack(len(files)))
        for path, data in files:
            encoded = os.fsencode(path)
            request += _ITEM.pack(len(encoded), len(data))
            request += encoded
            request += data
        stdin, stdout = self._pipes()
        try:
            stdin.write(request)
            stdin.flush()
            answer = stdout.read(_ANSWER.size * len(files))
        except (OSError, ValueError) as error:
            raise CreatorGone(f"the file creator stopped: {error!r}") from error
        if len(answer) < _ANSWER.size * len(files):
            raise CreatorGone(f"the file creator ended (exit status {self._process.poll()})")
        made: list[Made] = []
        for (code, partial), (path, _data) in zip(_ANSWER.iter_unpack(answer), files, strict=True):
            refused = None if code == 0 else OSError(code, os.strerror(code), str(path))
            made.append(Made(refused, bool(partial)))
        return made

    def close(self) -> None:
        """End the helper (it exits at the end of its input) and reap it."""
        stdin, stdout = self._pipes()
        for pipe in (stdin, stdout):
            try:
                pipe.close()
            except OSError as error:
                log.warning("sessions.creator_close_failed", error=repr(error))
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.error("sessions.creator_killed", detail="it did not end with its input")
            self._process.kill()
            self._process.wait()

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None
        assert stdout is not None
        return stdin, stdout


def open_made(path: Path) -> int:
    """A file the helper made, open for appending (the opener of its target from then on)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
