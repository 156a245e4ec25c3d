"""Triage: what a message is, one answer for the dispatcher, the cluster worker and its queue."""

from __future__ import annotations

import pytest

from gateway.turn.triage import Triage, triage


@pytest.mark.parametrize(
    "content",
    [
        "stop",
        "  STOP ",
        "停止",  # Chinese
        "Стоп",  # Russian, capitalised
        "arre\u0302te",  # French, the circumflex sent as a combining character
        "बंद   करो",  # Hindi, two words with extra spaces between them
    ],
)
def test_an_abort_word_in_any_language_is_a_stop(content: str) -> None:
    assert triage(content) == Triage("stop")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("/stop", Triage("stop", "/stop")),
        ("/STOP@MyBot", Triage("stop", "/stop")),
        ("/status", Triage("immediate", "/status")),
        ("/help", Triage("immediate", "/help")),
        ("/sessions@MyBot", Triage("immediate", "/sessions")),
    ],
)
def test_a_stop_command_and_the_commands_that_only_read_are_answered_at_once(
    content: str, expected: Triage
) -> None:
    assert triage(content) == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("/new travel plans", Triage("command", "/new", "travel plans")),
        ("  /s   work  ", Triage("command", "/s", "work")),
        ("/switch work", Triage("command", "/s", "work")),
        ("/b", Triage("command", "/back")),
        ("/d@MyBot old", Triage("command", "/delete", "old")),
        ("/reset", Triage("command", "/reset")),
        # Unknown: it waits its turn and is answered with the list of commands.
        ("/frobnicate now", Triage("command", "/frobnicate", "now")),
    ],
)
def test_other_commands_wait_their_turn_with_their_argument(content: str, expected: Triage) -> None:
    assert triage(content) == expected


@pytest.mark.parametrize(
    "content",
    [
        "hello",
        "stop the music when I say so",  # an abort word, but not the whole message
        "please /stop",  # a command name, but not at the start
        "https://example.com/status",
        "//cdn.example.com/app.js is missing",  # a protocol-relative URL
        "",
        "   ",
    ],
)
def test_everything_else_is_text_for_the_agent(content: str) -> None:
    assert triage(content) == Triage("text")
