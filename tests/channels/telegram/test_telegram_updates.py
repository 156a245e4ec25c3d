"""Reading Telegram updates into the gateway's inbound messages (no network)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from telegram import Update
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from channels.errors import (
    AuthError,
    ChannelError,
    FormattingRejected,
    MessageNotModified,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.telegram.errors import translate
from channels.telegram.updates import BotIdentity, read_update
from tests.fakes.telegram_server import detect_entities

BOT = BotIdentity(id=900, username="octos_bot")


def update(message: dict[str, Any] | None = None, **other: Any) -> Update:
    data: dict[str, Any] = {"update_id": 1, **other}
    if message is not None:
        data["message"] = message
    parsed = Update.de_json(data, None)
    assert parsed is not None
    return parsed


def message(
    text: str | None = "hi", *, chat_type: str = "private", **fields: Any
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "message_id": 10,
        "date": 1_700_000_000,
        "chat": {"id": 42 if chat_type == "private" else -100, "type": chat_type},
        "from": {"id": 42, "is_bot": False, "first_name": "Ann", "username": "ann"},
    }
    if text is not None:
        data["text"] = text
        entities = detect_entities(text)
        if entities:
            data["entities"] = entities
    data.update(fields)
    return data


def test_a_private_text_message() -> None:
    incoming = read_update(update(message("hello")), BOT, require_mention=True)
    assert incoming is not None
    got = incoming.message
    assert (got.channel, got.sender_id, got.chat_id) == ("telegram", "42|ann", "42")
    assert got.content == "hello"
    assert got.message_id == "42:10"
    assert got.metadata["sender_name"] == "Ann"


@pytest.mark.parametrize(
    "not_a_turn",
    [
        update(channel_post=message("post", chat_type="channel")),
        update({**message("beep"), "from": {"id": 5, "is_bot": True, "first_name": "Bot"}}),
        update(message(None, sticker=None)),
        update(message("   ")),
    ],
)
def test_what_is_not_a_users_turn_is_ignored(not_a_turn: Update) -> None:
    assert read_update(not_a_turn, BOT, require_mention=False) is None


def test_an_edit_names_the_message_it_edits_and_has_an_id_of_its_own() -> None:
    edited = update(edited_message=message("edited", edit_date=1_700_000_000))
    incoming = read_update(edited, BOT, require_mention=False)
    assert incoming is not None
    got = incoming.message
    assert got.content == "edited"
    assert got.metadata["edit"] == {"message_id": "42:10"}
    assert got.message_id == "42:10:edit:1700000000"
    assert got.edited_id() == got.shown_id() == "42:10"


def reaction_update(
    old: list[str], new: list[str], *, user: dict[str, Any] | None = None
) -> Update:
    reaction: dict[str, Any] = {
        "chat": {"id": -100, "type": "supergroup", "title": "Team"},
        "message_id": 77,
        "date": 1_700_000_000,
        "old_reaction": [{"type": "emoji", "emoji": each} for each in old],
        "new_reaction": [{"type": "emoji", "emoji": each} for each in new],
    }
    if user is not None:
        reaction["user"] = user
    else:
        reaction["actor_chat"] = {"id": -100, "type": "supergroup", "title": "Team"}
    return update(message_reaction=reaction)


ANN = {"id": 42, "is_bot": False, "first_name": "Ann", "username": "ann"}


def test_a_reaction_added_names_its_emoji_and_message() -> None:
    added = reaction_update(["👀"], ["👀", "👍"], user=ANN)
    incoming = read_update(added, BOT, require_mention=True)
    assert incoming is not None
    message = incoming.message
    assert message.content == "[reaction 👍 to a message]"
    assert message.metadata["reaction"] == {"emoji": "👍", "message_id": "77"}
    assert message.chat_id == "-100"
    assert message.sender_id == "42|ann"
    # The update's id: a redelivered update is the same reaction.
    assert message.message_id == "reaction:1"


@pytest.mark.parametrize(
    "taken_back_or_anonymous",
    [
        reaction_update(["👍"], [], user=ANN),
        reaction_update([], ["👍"]),
        reaction_update([], ["👍"], user={**ANN, "is_bot": True}),
    ],
)
def test_a_reaction_taken_back_or_not_from_a_person_is_ignored(
    taken_back_or_anonymous: Update,
) -> None:
    assert read_update(taken_back_or_anonymous, BOT, require_mention=True) is None


def test_group_mentions_are_matched_case_insensitively_and_cut() -> None:
    incoming = read_update(
        update(message("@Octos_Bot  please help", chat_type="group")), BOT, require_mention=True
    )
    assert incoming is not None
    assert incoming.message.content == "please help"


def test_a_text_mention_of_the_bot_counts() -> None:
    text = "Octos, status?"
    entity = {"type": "text_mention", "offset": 0, "length": 5, "user": {"id": 900,
              "is_bot": True, "first_name": "Octos"}}  # fmt: skip
    incoming = read_update(
        update(message(text, chat_type="supergroup", entities=[entity])), BOT, require_mention=True
    )
    assert incoming is not None
    assert incoming.message.content == ", status?"


def test_a_mention_of_someone_else_does_not_count() -> None:
    group_message = message("@someone_else look", chat_type="group")
    assert read_update(update(group_message), BOT, require_mention=True) is None


def test_a_command_for_another_bot_keeps_its_suffix_in_private() -> None:
    incoming = read_update(update(message("/help@other_bot")), BOT, require_mention=True)
    assert incoming is not None
    assert incoming.message.content == "/help@other_bot"
    own = read_update(update(message("/help@octos_bot topic")), BOT, require_mention=True)
    assert own is not None
    assert own.message.content == "/help topic"


def test_a_caption_with_a_mention_and_a_photo() -> None:
    photo = [
        {"file_id": "small", "file_unique_id": "u1", "width": 90, "height": 90},
        {"file_id": "big", "file_unique_id": "u2", "width": 900, "height": 900, "file_size": 7},
    ]
    caption = "@octos_bot what is this?"
    data = message(
        None,
        chat_type="group",
        caption=caption,
        caption_entities=detect_entities(caption),
        photo=photo,
    )
    incoming = read_update(update(data), BOT, require_mention=True)
    assert incoming is not None
    assert incoming.message.content == "what is this?"
    [ref] = incoming.media
    assert (ref.kind, ref.file_id, ref.file_size) == ("photo", "big", 7)


def test_an_animation_is_one_attachment_not_two() -> None:
    animation = {"file_id": "anim", "file_unique_id": "a1", "width": 1, "height": 1,
                 "duration": 1, "file_name": "cat.mp4"}  # fmt: skip
    data = message(None, animation=animation, document={"file_id": "anim", "file_unique_id": "a1"})
    incoming = read_update(update(data), BOT, require_mention=False)
    assert incoming is not None
    assert [ref.kind for ref in incoming.media] == ["animation"]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RetryAfter(12), RateLimited),
        (RetryAfter(timedelta(seconds=3)), RateLimited),
        (BadRequest("Can't parse entities: unsupported start tag"), FormattingRejected),
        (BadRequest("Message is not modified: specified new message content"), MessageNotModified),
        (BadRequest("Message is too long"), MessageTooLong),
        (BadRequest("Message caption is too long"), MessageTooLong),
        (BadRequest("Chat not found"), ChannelError),
        (InvalidToken("Unauthorized"), AuthError),
        (Forbidden("Forbidden: bot was blocked by the user"), AuthError),
        (TimedOut(), TransientError),
        (NetworkError("Bad Gateway"), TransientError),
        (Conflict("terminated by other getUpdates request"), TransientError),
        (TelegramError("Invalid server response"), TransientError),
        (ChatMigrated(-100123), ChannelError),
    ],
)
def test_telegram_errors_are_translated(error: TelegramError, expected: type) -> None:
    translated = translate(error, "sendMessage")
    assert type(translated) is expected
    assert translated.channel == "telegram"
    assert "sendMessage" in str(translated)
    if isinstance(translated, RateLimited):
        assert translated.retry_after_s in (12.0, 3.0)
