"""SessionKey: the four text forms, topics, and telling a profile from a channel."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from bus import KNOWN_CHANNELS, MAIN_PROFILE, SessionKey, is_channel_name


@pytest.mark.parametrize(
    ("text", "profile", "channel", "chat_id", "topic"),
    [
        ("telegram:12345", None, "telegram", "12345", None),
        ("work:telegram:12345", "work", "telegram", "12345", None),
        ("telegram:12345#research", None, "telegram", "12345", "research"),
        ("work:telegram:12345#research", "work", "telegram", "12345", "research"),
    ],
)
def test_four_forms_parse_and_print_back(
    text: str, profile: str | None, channel: str, chat_id: str, topic: str | None
) -> None:
    key = SessionKey.parse(text)
    assert (key.profile, key.channel, key.chat_id, key.topic()) == (
        profile,
        channel,
        chat_id,
        topic,
    )
    assert str(key) == text


def test_base_key_drops_the_topic() -> None:
    key = SessionKey.parse("work:telegram:12345#research")
    assert key.base_key() == "work:telegram:12345"
    assert SessionKey.parse("telegram:1#a").base_key() == "telegram:1"
    assert SessionKey.parse(key.base_key()).topic() is None


def test_with_topic() -> None:
    key = SessionKey.parse("_main:slack:C1")
    assert str(key.with_topic("ideas")) == "_main:slack:C1#ideas"
    assert key.with_topic("ideas").with_topic(None) == key
    assert key.with_topic("") == key


def test_chat_id_with_colons_stays_a_channel_key() -> None:
    key = SessionKey.parse("discord:guild:123")
    assert (key.profile, key.channel, key.chat_id) == (None, "discord", "guild:123")
    assert str(key) == "discord:guild:123"


def test_profiled_chat_id_may_hold_colons() -> None:
    key = SessionKey.parse("work:discord:guild:123#t")
    assert (key.profile, key.channel, key.chat_id, key.topic()) == (
        "work",
        "discord",
        "guild:123",
        "t",
    )


@pytest.mark.parametrize("channel", ["line", "lark", "wechat", "telegram", "qq-bot", "wecom-bot"])
def test_profiled_keys_of_every_shipped_channel(channel: str) -> None:
    key = SessionKey.parse(f"work:{channel}:1")
    assert (key.profile, key.channel, key.chat_id) == ("work", channel, "1")
    assert is_channel_name(channel)


def test_unknown_first_part_with_unknown_second_is_a_channel_key() -> None:
    key = SessionKey.parse("mychat:room:7")
    assert (key.profile, key.channel, key.chat_id) == (None, "mychat", "room:7")


def test_key_without_colon_is_refused() -> None:
    with pytest.raises(ValueError, match="no ':'"):
        SessionKey.parse("telegram")


def test_for_chat_builds_the_profiled_form() -> None:
    key = SessionKey.for_chat(MAIN_PROFILE, "telegram", "5", "notes")
    assert str(key) == "_main:telegram:5#notes"
    assert SessionKey.parse(str(key)) == key


class _Holder(BaseModel):
    key: SessionKey
    other: SessionKey | None = None


def test_session_key_as_a_pydantic_field_is_a_string() -> None:
    holder = _Holder(key=SessionKey.parse("work:line:U1#t"), other=None)
    text = holder.model_dump_json()
    assert text == '{"key":"work:line:U1#t","other":null}'
    assert _Holder.model_validate_json(text) == holder
    assert _Holder.model_validate({"key": "telegram:1"}).key == SessionKey("telegram", "1")
    assert holder.model_dump()["key"] == holder.key


def test_bad_key_in_a_pydantic_field_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        _Holder.model_validate_json('{"key": "nocolon"}')


_part = st.text(
    alphabet=st.characters(exclude_characters=":#", codec="utf-8"),
    min_size=1,
    max_size=12,
)
_profiles = _part.filter(lambda p: not is_channel_name(p))
_channels = st.sampled_from(sorted(KNOWN_CHANNELS))
_chat_ids = st.lists(_part, min_size=1, max_size=3).map(":".join)
_topics = st.none() | st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)


@given(profile=st.none() | _profiles, channel=_channels, chat_id=_chat_ids, topic=_topics)
def test_round_trip(profile: str | None, channel: str, chat_id: str, topic: str | None) -> None:
    key = SessionKey.for_chat(profile, channel, chat_id, topic)
    parsed = SessionKey.parse(str(key))
    assert parsed == key
    assert parsed.base_key() == key.base_key()
    assert parsed.topic() == topic
    assert _Holder.model_validate_json(_Holder(key=key).model_dump_json()).key == key
