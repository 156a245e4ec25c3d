"""Abort triggers in nine languages, answered in the trigger's language."""

from __future__ import annotations

import pytest

from bus import ABORT_REPLIES, ABORT_TRIGGERS, AbortLanguage, abort_response, is_abort_trigger
from bus.abort import abort_language

EXPECTED = {
    AbortLanguage.ENGLISH: ["stop", "abort", "cancel", "halt", "interrupt", "quit", "enough"],
    AbortLanguage.CHINESE: ["停", "停止", "取消", "停下", "别说了"],
    AbortLanguage.JAPANESE: ["やめて", "止めて", "ストップ"],
    AbortLanguage.RUSSIAN: ["стоп", "отмена", "хватит"],
    AbortLanguage.FRENCH: ["arrête", "annuler"],
    AbortLanguage.SPANISH: ["detente", "cancelar"],
    AbortLanguage.HINDI: ["रुको", "बंद करो"],
    AbortLanguage.ARABIC: ["توقف", "قف"],
    AbortLanguage.KOREAN: ["멈춰", "중지"],
}
ALL = [(word, language) for language, words in EXPECTED.items() for word in words]


def test_the_list_is_complete() -> None:
    assert dict(ABORT_TRIGGERS) == {word: language for word, language in ALL}
    assert set(ABORT_REPLIES) == set(AbortLanguage)
    assert all(reply.startswith("🛑 ") for reply in ABORT_REPLIES.values())


@pytest.mark.parametrize(("word", "language"), ALL)
def test_every_trigger_is_recognised_and_answered_in_its_language(
    word: str, language: AbortLanguage
) -> None:
    assert is_abort_trigger(word)
    assert abort_language(word) is language
    assert abort_response(word) == ABORT_REPLIES[language]


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        ("stop", "🛑 Cancelled."),
        ("停", "🛑 已取消。"),
        ("やめて", "🛑 キャンセルしました。"),
    ],
)
def test_known_replies(text: str, reply: str) -> None:
    assert abort_response(text) == reply


@pytest.mark.parametrize(
    "text",
    ["  STOP  ", "Stop\n", "\tCancel", "ОТМЕНА", "Arrête", "ARRÊTE", "arre\u0302te", "बंद  करो"],
)
def test_case_surrounding_space_and_composition_do_not_matter(text: str) -> None:
    assert is_abort_trigger(text)


@pytest.mark.parametrize(
    "text",
    [
        "wait",
        "exit",
        "para",
        "Para",
        "stop it",
        "please stop",
        "stop!",
        "stopp",
        "",
        "   ",
        "取消了吗",
    ],
)
def test_not_triggers(text: str) -> None:
    assert not is_abort_trigger(text)
    assert abort_language(text) is None


def test_reply_for_a_non_trigger_is_english() -> None:
    assert abort_response("hello") == "🛑 Cancelled."
