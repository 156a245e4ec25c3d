"""What a terminal shows after a program's output: enough of a terminal to read the lines of
a chat on it (text, CR, LF, backspace, cursor up, erase to the end of the line or screen;
colours and other escape sequences are dropped)."""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\x1b\[([0-9;]*)([@-~])")


def screen_lines(output: bytes, columns: int = 80) -> list[str]:
    """The screen's lines, top to bottom, as `output` leaves them (one character a column)."""
    text = output.decode(errors="replace")
    lines: list[list[str]] = [[]]
    row = column = 0
    position = 0
    while position < len(text):
        if escape := _ESCAPE.match(text, position):
            argument, command = escape.groups()
            if command == "A":
                row = max(0, row - int(argument or "1"))
            elif command in ("K", "J"):
                del lines[row][column:]
                if command == "J":
                    del lines[row + 1 :]
            position = escape.end()
            continue
        char = text[position]
        position += 1
        if char == "\r":
            column = 0
        elif char == "\b":
            column = max(0, column - 1)
        elif char == "\n" or column == columns:
            row += 1
            if row == len(lines):
                lines.append([])
            if char == "\n":
                continue
            column = 0
        if char not in "\r\b\n":
            line = lines[row]
            line.extend(" " * (column - len(line)))
            line[column : column + 1] = [char]
            column += 1
    return ["".join(line) for line in lines]
