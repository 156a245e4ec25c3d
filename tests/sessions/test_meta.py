"""SessionMeta: how an append moves the meta (touched, titled) and its line's bytes; a Session
showing its appends."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bus import Message, MessageRole, SessionKey
from sessions.meta import SessionMeta, first_title, title_of
from sessions.session import Session

KEY = SessionKey("telegram", "42")
CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LATER = datetime(2026, 1, 2, 3, 5, 0, tzinfo=UTC)


def _titled_one_by_one(meta: SessionMeta, messages: list[Message]) -> SessionMeta:
    """The rule step by step, as octos applies it: the first message that gives a title wins."""
    for message in messages:
        if meta.title is None and (title := title_of(message)) is not None:
            meta = meta.model_copy(update={"title": title})
    return meta


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [Message.user("hello there")],
        [Message.assistant("I speak first"), Message.user("  then the user  ")],
        [Message.user("   "), Message.user("the second one titles")],
        [Message.system("a system note"), Message(role=MessageRole.TOOL, content="42")],
        [Message.user("x" * 80), Message.user("not this one")],
    ],
)
def test_appended_touches_then_titles_in_one_copy(messages: list[Message]) -> None:
    untitled = SessionMeta.new(KEY, now=CREATED)
    appended = untitled.appended(messages, now=LATER)
    assert appended == _titled_one_by_one(untitled.touched(LATER), messages)
    assert appended.to_line() == _titled_one_by_one(untitled.touched(LATER), messages).to_line()
    assert appended.title == first_title(messages)
    assert untitled.updated_at == CREATED  # a copy: the meta it came from is unchanged


def test_appended_keeps_a_title_it_already_has() -> None:
    titled = SessionMeta.new(KEY, now=CREATED, title="kept")
    appended = titled.appended([Message.user("a new title?")], now=LATER)
    assert (appended.title, appended.updated_at) == ("kept", LATER)


def test_a_new_meta_given_a_title_writes_the_line_a_titled_copy_would() -> None:
    first = Message.user("what is the weather like on the moon today? " * 3)
    given = SessionMeta.new(KEY, now=CREATED, title=title_of(first))
    copied = SessionMeta.new(KEY, now=CREATED).model_copy(update={"title": title_of(first)})
    assert given.to_line() == copied.to_line()
    assert (
        given.to_line()
        == given.model_dump_json(exclude_none=True, exclude={"title_manual"}).encode() + b"\n"
    )


def test_a_session_shows_its_appends_as_the_meta_would() -> None:
    """`Session.appended` stamps its meta only when the meta is read; what is read is what
    `SessionMeta.appended` gives, append after append."""
    titled = SessionMeta.new(KEY, now=CREATED, title="kept")
    session = Session(KEY, titled)
    first, second = [Message.user("one")], [Message.assistant("two")]
    session.appended(first, now=LATER)
    session.appended(second, now=LATER.replace(minute=9))
    assert session.meta == titled.appended(first, LATER).appended(second, LATER.replace(minute=9))
    assert session.messages == first + second
    assert titled.updated_at == CREATED  # the meta it was given is unchanged

    untitled = Session(KEY, SessionMeta.new(KEY, now=CREATED))
    untitled.appended([Message.user("what is the weather like on the moon")], now=LATER)
    assert (untitled.meta.title, untitled.meta.updated_at) == (
        "what is the weather like on the moon",
        LATER,
    )
    assert untitled == Session(KEY, untitled.meta, list(untitled.messages))


def test_a_session_is_titled_by_its_first_titling_append_when_its_meta_is_read() -> None:
    untitled = SessionMeta.new(KEY, now=CREATED)
    session = Session(KEY, untitled)
    appends = [[Message.assistant("I speak first")], [Message.user("then the user")], []]
    appends.append([Message.user("not this one")])
    expected = untitled
    for number, messages in enumerate(appends):
        session.appended(messages, now=LATER.replace(minute=number))
        expected = expected.appended(messages, LATER.replace(minute=number))
    assert session.meta == expected
    assert session.meta.title == "then the user"
