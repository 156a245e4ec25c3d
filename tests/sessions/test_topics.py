"""Topic names and the active topic of each chat, remembered across restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessions import ActiveTopics, InvalidTopicName, validate_topic_name
from sessions.topics import ChatTopics


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
    assert await topics.active(chat) is None
    await topics.switch(chat, "research")
    await topics.switch(chat, "ideas")
    await topics.switch("_main:discord:2", "other")

    reopened = ActiveTopics(tmp_path)
    await reopened.load()
    assert await reopened.active(chat) == "ideas"
    assert await reopened.state(chat) == ChatTopics("ideas", "research")
    assert await reopened.back(chat) == "research"
    assert await reopened.back(chat) == "ideas"
    await reopened.switch(chat, None)
    assert await reopened.active(chat) is None
    assert await reopened.back(chat) == "ideas"
    assert await reopened.back(chat) is None
    on_disk = json.loads((tmp_path / "active_sessions.json").read_text())
    assert on_disk == {
        "active": {"_main:discord:2": "other"},
        "previous": {"_main:discord:2": "", "_main:telegram:1": "ideas"},
    }
    assert _names_in(tmp_path) == ["active_sessions.json"]


async def test_back_without_a_previous_topic_stays(tmp_path: Path) -> None:
    topics = ActiveTopics(tmp_path)
    assert await topics.back("c:1") is None
    assert not (tmp_path / "active_sessions.json").exists()  # nothing changed, nothing written
    await topics.switch("c:1", "x")
    await topics.forget("c:1", "x")
    assert await topics.state("c:1") == ChatTopics(None, None)


async def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "active_sessions.json").mkdir()  # a directory: the file cannot be replaced
    topics = ActiveTopics(tmp_path)
    with pytest.raises(IsADirectoryError):
        await topics.switch("c:1", "x")
    assert await topics.active("c:1") is None


async def test_an_unreadable_file_starts_every_chat_on_its_default(tmp_path: Path) -> None:
    (tmp_path / "active_sessions.json").write_text("{not json")
    topics = ActiveTopics(tmp_path)
    await topics.load()
    assert await topics.active("_main:telegram:1") is None


def test_the_steps_follow_octos_rules() -> None:
    start = ChatTopics()
    assert start.switched(None) is start
    research = start.switched("research")
    assert research == ChatTopics("research", "")
    assert research.back() == ChatTopics(None, "research")
    assert research.back().back() == research
    assert research.forgotten("research") == ChatTopics(None, None)
    assert ChatTopics("a", "b").forgotten("b") == ChatTopics("a", None)
    assert ChatTopics("a", "b").forgotten("c") == ChatTopics("a", "b")


async def test_a_chats_agent_is_remembered_across_restarts_and_topic_switches(
    tmp_path: Path,
) -> None:
    topics = ActiveTopics(tmp_path)
    await topics.choose_agent("p:telegram:1", "coder")
    await topics.switch("p:telegram:1", "work")
    await topics.back("p:telegram:1")
    again = ActiveTopics(tmp_path)
    await again.load()
    assert await again.state("p:telegram:1") == ChatTopics(None, "work", "coder")
    assert json.loads(topics.path.read_text())["agent"] == {"p:telegram:1": "coder"}
    await again.choose_agent("p:telegram:1", None)
    assert (await again.state("p:telegram:1")).agent is None
