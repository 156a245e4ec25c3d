"""The terminal channel's line editing: the keys a terminal sends, made into lines."""

from __future__ import annotations

import termios

from channels.cli.terminal import (
    EndOfInput,
    Entered,
    Erased,
    LineEditor,
    Typed,
    display_width,
)


def editor() -> LineEditor:
    """With a terminal's usual keys: DEL erases, Ctrl-U kills, Ctrl-W erases a word."""
    control_chars: list[bytes | int] = [b"\0"] * 32
    control_chars[termios.VERASE] = b"\x7f"
    control_chars[termios.VKILL] = b"\x15"
    control_chars[termios.VWERASE] = b"\x17"
    control_chars[termios.VEOF] = b"\x04"
    return LineEditor(control_chars)


def test_keys_make_a_line_and_enter_hands_it_over() -> None:
    keys = editor()
    assert list(keys.feed(b"hi\x7fey\r")) == [
        Typed("h"),
        Typed("i"),
        Erased("i"),
        Typed("e"),
        Typed("y"),
        Entered("hey"),
    ]
    assert keys.line == ""


def test_word_and_line_erase_take_what_the_shell_would() -> None:
    keys = editor()
    list(keys.feed(b"one two  "))
    assert list(keys.feed(b"\x17")) == [Erased("two  ")]
    assert list(keys.feed(b"\x15")) == [Erased("one ")]
    assert list(keys.feed(b"\x7f\x17\x15")) == []  # nothing left to erase


def test_a_character_split_across_reads_and_its_combining_mark_erase_as_one() -> None:
    keys = editor()
    accented = "e\u0301".encode()  # e + combining acute accent
    wide = "你".encode()
    assert list(keys.feed(wide[:2])) == []
    assert list(keys.feed(wide[2:] + accented)) == [Typed("你"), Typed("e"), Typed("\u0301")]
    assert list(keys.feed(b"\x7f")) == [Erased("e\u0301")]
    assert display_width(keys.line) == 2


def test_arrows_and_alt_keys_leave_nothing_in_the_line() -> None:
    keys = editor()
    assert list(keys.feed(b"a\x1b[D\x1bOA\x1b[1;5C\x1bxb\t")) == [Typed("a"), Typed("b")]
    assert keys.line == "ab"


def test_end_of_input_only_on_an_empty_line() -> None:
    keys = editor()
    assert list(keys.feed(b"x\x04")) == [Typed("x")]
    assert list(keys.feed(b"\x15\x04")) == [Erased("x"), EndOfInput()]


def test_the_prompts_colours_take_no_columns() -> None:
    assert display_width("\x1b[1;32myou ›\x1b[0m ") == len("you › ")
