"""ChatDirectories: which chats have a directory, told by a session file's path alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus import SessionKey
from sessions.layout import ChatDirectories, SessionLayout, _chat_of

KEYS = [
    SessionKey("telegram", "12345"),
    SessionKey("telegram", "12345", topic_name="research"),
    SessionKey("discord", "guild:123", profile="work", topic_name=""),
    SessionKey("matrix", "!room:example.org", topic_name="default"),
    SessionKey("slack", "x" * 500, topic_name="y" * 500),  # both names cut and hashed
]


@pytest.mark.parametrize("root", [Path("/data"), Path("relative/data"), Path("/")])
@pytest.mark.parametrize("key", KEYS)
def test_the_chat_of_a_session_path_is_its_directory_under_users(
    root: Path, key: SessionKey
) -> None:
    path = SessionLayout(root).path_for(key)
    assert (
        _chat_of(path)
        == path.parent.parent.name
        == SessionLayout(root).user_dir(key.base_key()).name
    )


def test_a_new_chat_is_noted_once_and_its_directory_handed_to_the_next_sync() -> None:
    layout = SessionLayout(Path("/data"))
    chats = ChatDirectories(set())
    default, topic = layout.path_for(KEYS[0]), layout.path_for(KEYS[1])
    assert not chats.has(default)
    assert chats.add_new(default)
    assert chats.has(topic)  # one directory for every topic of a chat
    assert not chats.add_new(topic)
    assert chats.take_new() == {default.parent.parent}
    assert chats.take_new() == set()
