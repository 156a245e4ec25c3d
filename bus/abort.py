"""Abort triggers: a user who says "stop" in their own language cancels the running turn.

A message is a trigger only when the whole of it, trimmed and case-folded, is one of the words
below. Words common in ordinary conversation are deliberately left out ("wait", "exit", and
Spanish/Portuguese "para", which also means "for"): missing an abort costs the user one more
message, a false abort throws away their turn.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class AbortLanguage(StrEnum):
    ENGLISH = "en"
    CHINESE = "zh"
    JAPANESE = "ja"
    RUSSIAN = "ru"
    FRENCH = "fr"
    SPANISH = "es"
    HINDI = "hi"
    ARABIC = "ar"
    KOREAN = "ko"


#: The confirmation sent back, in the language of the trigger.
ABORT_REPLIES: Mapping[AbortLanguage, str] = MappingProxyType(
    {
        AbortLanguage.ENGLISH: "🛑 Cancelled.",
        AbortLanguage.CHINESE: "🛑 已取消。",
        AbortLanguage.JAPANESE: "🛑 キャンセルしました。",
        AbortLanguage.RUSSIAN: "🛑 Отменено.",
        AbortLanguage.FRENCH: "🛑 Annulé.",
        AbortLanguage.SPANISH: "🛑 Cancelado.",
        AbortLanguage.HINDI: "🛑 रद्द कर दिया गया।",
        AbortLanguage.ARABIC: "🛑 تم الإلغاء.",
        AbortLanguage.KOREAN: "🛑 취소되었습니다.",
    }
)

_TRIGGERS_BY_LANGUAGE: Mapping[AbortLanguage, tuple[str, ...]] = {
    AbortLanguage.ENGLISH: ("stop", "abort", "cancel", "halt", "interrupt", "quit", "enough"),
    AbortLanguage.CHINESE: ("停", "停止", "取消", "停下", "别说了"),
    AbortLanguage.JAPANESE: ("やめて", "止めて", "ストップ"),
    AbortLanguage.RUSSIAN: ("стоп", "отмена", "хватит"),
    AbortLanguage.FRENCH: ("arrête", "annuler"),
    AbortLanguage.SPANISH: ("detente", "cancelar"),
    AbortLanguage.HINDI: ("रुको", "बंद करो"),
    AbortLanguage.ARABIC: ("توقف", "قف"),
    AbortLanguage.KOREAN: ("멈춰", "중지"),
}


def _normalize(text: str) -> str:
    # NFC so that a decomposed "arrête" (e + combining circumflex, as some keyboards send it)
    # matches; runs of whitespace count as one space, so "बंद  करो" is still two words.
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


#: Every trigger, normalised, with its language.
ABORT_TRIGGERS: Mapping[str, AbortLanguage] = MappingProxyType(
    {
        _normalize(word): language
        for language, words in _TRIGGERS_BY_LANGUAGE.items()
        for word in words
    }
)


def abort_language(text: str) -> AbortLanguage | None:
    """The language of the abort trigger `text` is, or None when it is not one."""
    return ABORT_TRIGGERS.get(_normalize(text))


def is_abort_trigger(text: str) -> bool:
    return abort_language(text) is not None


def abort_response(text: str) -> str:
    """The cancellation reply in the trigger's language (English when `text` is no trigger)."""
    return ABORT_REPLIES[abort_language(text) or AbortLanguage.ENGLISH]
