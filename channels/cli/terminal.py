"""The terminal channel's own line editing, so a streamed reply and the user's typing never share
a line.

In the terminal's usual (canonical) mode the kernel echoes every key where the cursor is: typed
while a reply streams, the keys land in the middle of the reply. So on a terminal the channel
turns the kernel's echo and line editing off (cbreak mode: Ctrl-C, Ctrl-Z and Ctrl-S still work)
and does both itself: `LineEditor` turns the bytes typed into edits of the line, which the
channel shows where it wants, after the reply rather than inside it.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import termios
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

#: What the editor does with keys it has no use for: the escape sequences of arrows, function
#: keys and Alt+key, skipped whole so they leave no stray letters in the line.
_ESCAPE = "\x1b"
_CSI_FINAL = range(0x40, 0x7F)
_LFLAG, _CC = 3, 6


@dataclass(frozen=True, slots=True)
class Typed:
    """Text added at the end of the line."""

    text: str


@dataclass(frozen=True, slots=True)
class Erased:
    """Text taken from the end of the line (a backspace, Ctrl-W, Ctrl-U)."""

    text: str


@dataclass(frozen=True, slots=True)
class Entered:
    """The line, finished with Enter; the editor starts an empty one."""

    line: str


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """Ctrl-D on an empty line."""


Edit = Typed | Erased | Entered | EndOfInput


def display_width(text: str) -> int:
    """Columns `text` takes on a terminal: two for wide (CJK) characters, none for combining
    marks; escape sequences (the prompt's colours) take none."""
    width = 0
    in_escape = False
    for char in text:
        if in_escape:
            in_escape = not ("@" <= char <= "~" and char != "[")
            continue
        if char == _ESCAPE:
            in_escape = True
        elif unicodedata.combining(char) or unicodedata.category(char) in ("Cf", "Cc"):
            continue
        else:
            width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


class LineEditor:
    """The line being typed, from the bytes a terminal in cbreak mode sends.

    The erase, kill, word-erase and end-of-file keys are the terminal's own (`stty -a`), so a
    user's Backspace or Ctrl-U does here what it does in their shell.
    """

    def __init__(self, control_chars: list[bytes | int]) -> None:
        def key(index: int, default: str) -> str:
            value = control_chars[index] if index < len(control_chars) else b""
            if isinstance(value, bytes) and value not in (b"", b"\0"):
                return value.decode("latin-1")
            return default

        self.line = ""
        self._erase = {key(termios.VERASE, "\x7f"), "\x7f", "\b"}
        self._kill = key(termios.VKILL, "\x15")
        self._word_erase = key(termios.VWERASE, "\x17")
        self._end_of_file = key(termios.VEOF, "\x04")
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        #: The escape sequence being skipped, from its ESC; None outside one.
        self._escape: str | None = None

    def feed(self, data: bytes) -> Iterator[Edit]:
        """The edits the keys in `data` make, each as it is made: `line` is the line after
        the edit being looked at, not after all of `data`."""
        for char in self._decoder.decode(data):
            edit = self._key(char)
            if edit is not None:
                yield edit

    def _key(self, char: str) -> Edit | None:
        if self._escape is not None:
            self._skip_escape(char)
            return None
        if char == _ESCAPE:
            self._escape = char
            return None
        if char in ("\n", "\r"):
            line, self.line = self.line, ""
            return Entered(line)
        if char in self._erase:
            return self._cut(len(self.line) - self._last_character_start())
        if char == self._kill:
            return self._cut(len(self.line))
        if char == self._word_erase:
            kept = self.line.rstrip()
            last_word = kept.split()[-1] if kept.split() else ""
            return self._cut(len(self.line) - len(kept) + len(last_word))
        if char == self._end_of_file:
            return None if self.line else EndOfInput()
        if not char.isprintable():
            return None  # Tab, Ctrl-letters the terminal does not use: nothing to show
        self.line += char
        return Typed(char)

    def _skip_escape(self, char: str) -> None:
        assert self._escape is not None
        self._escape += char
        if len(self._escape) == 2:
            # ESC [ (CSI) and ESC O (SS3) go on; ESC x (Alt+x) ends here.
            if char not in ("[", "O"):
                self._escape = None
        elif self._escape[1] == "O" or ord(char) in _CSI_FINAL:
            self._escape = None

    def _last_character_start(self) -> int:
        """Where the last character starts, with the combining marks that follow it."""
        start = len(self.line)
        while start > 0:
            start -= 1
            if not unicodedata.combining(self.line[start]):
                break
        return start

    def _cut(self, count: int) -> Erased | None:
        if count <= 0:
            return None
        cut = self.line[-count:]
        self.line = self.line[:-count]
        return Erased(cut)


class CbreakMode:
    """The terminal on `fd` without the kernel's echo and line editing, restored on `restore`.

    Signals (Ctrl-C, Ctrl-Z) and flow control (Ctrl-S, Ctrl-Q) stay the kernel's.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._saved = termios.tcgetattr(fd)
        #: Whether the terminal echoed what was typed: the editor echoes it only then.
        self.echoes = bool(self._saved[_LFLAG] & termios.ECHO)
        self.control_chars: list[bytes | int] = list(self._saved[_CC])

    def enter(self) -> None:
        mode = termios.tcgetattr(self._fd)
        mode[_LFLAG] &= ~(termios.ECHO | termios.ICANON)
        mode[_CC][termios.VMIN] = 1
        mode[_CC][termios.VTIME] = 0
        # TCSANOW: a draining change would wait, on the event loop, for a paused terminal.
        termios.tcsetattr(self._fd, termios.TCSANOW, mode)

    def restore(self) -> None:
        # A terminal gone (its window closed) has nothing left to restore.
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)


def terminal_columns(fd: int) -> int:
    try:
        return os.get_terminal_size(fd).columns or 80
    except OSError:
        return 80
