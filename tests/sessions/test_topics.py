"""Topic names and the active topic of each chat, remembered across restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessions import ActiveTopics, InvalidTopicName, validate_topic_name


@pytest.mark.parametrize("name", ["research", "Ideas 2", "日本語", "a" * 50, "default-ish"])
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a" * 51, "at most 50 characters"),
        ("a#b", "'#'"),
        ("a:b", "':'"),
        ("a/b", "'/'"),
        ("tab\there", "control characters"),
        ("bell\x07", "control characters"),
        ("default", "'default'"),
        ("DeFaUlT", "'default'"),
    ],
)
def test_invalid_topic_names_say_what_is_wrong(name: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as refused:
        validate_topic_name(name)
    assert isinstance(refused.value, InvalidTopicName)


def _names_in(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


async def test_switch_and_back_are_remembered_across_restarts(tmp_path: Path) -> None:
    topics = ActiveTopics(tmp_path)
    await topics.load()
    chat = "_main:telegram:1"
    assert topics.active(chat) is None
    topics.switch(chat, "research")
    topics.switch(chat, "ideas")
    topics.switch("_main:discord:2", "other")
    await topics.save()

    reopened = ActiveTopics(tmp_path)
    await reopened.load()
    assert reopened.active(chat) == "ideas"
    assert reopened.previous(chat) == "research"
    assert reopened.back(chat) == "research"
    assert reopened.back(chat) == "ideas"
    reopened.switch(chat, None)
    assert reopened.active(chat) is None
    assert reopened.back(chat) == "ideas"
    assert reopened.back(chat) is None
    await reopened.save()
    on_disk = json.loads((tmp_path / "active_sessions.json").read_text())
    assert on_disk == {
        "active": {"_main:discord:2": "other"},
        "previous": {"_main:discord:2": "", "_main:telegram:1": "ideas"},
    }
    assert _names_in(tmp_path) == ["active_sessions.json"]


async def test_back_without_a_previous_topic_stays(tmp_path: Path) -> None:
    topics = ActiveTopics(tmp_path)
    assert not topics.has_previous("c:1")
    assert topics.back("c:1") is None
    topics.switch("c:1", "x")
    topics.forget("c:1", "x")
    assert topics.active("c:1") is None


async def test_an_unreadable_file_starts_every_chat_on_its_default(tmp_path: Path) -> None:
    (tmp_path / "active_sessions.json").write_text("{not json")
    topics = ActiveTopics(tmp_path)
    await topics.load()
    assert topics.active("_main:telegram:1") is None
