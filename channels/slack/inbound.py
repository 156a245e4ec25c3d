"""Which Slack events the bot answers, and what the gateway sees of them.

The app listens to `message` and `app_mention`. A post that mentions the bot in a channel the
bot is in arrives twice (once as each); both parse to the same `SlackPost` (same channel and
`ts`), and the channel publishes only the first. A user's edit (`message_changed`) and delete
(`message_deleted`) of their message are passed on as such (`parse_change`: `bus.EDIT`,
`bus.DELETE`); joins and other subtypes are not addressed to the bot; neither are messages from
bots (the bot itself included: two bots answering each other never stop). A user's
`reaction_added` to one of the bot's messages is a `bus.REACTION` message (`parse_reaction`; the
profile's `inbound_reactions` decides whether it goes further; the app must subscribe to
`reaction_added`); Slack tells the message's `ts`, not its text. A post in a thread
names the thread's parent as what it replies to (`bus.REPLY_TO`, its id only: its text would
cost a `conversations.replies` call per post).

Slack sends text with `&`, `<` and `>` escaped and mentions as `<@U123>`: the bot's own mention
is taken out, the entities decoded, so the agent reads what the user typed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from bus import EDIT, REACTION, REPLY_TO, InboundMessage, quoted, reaction_note
from channels.buttons import tap_metadata

CHANNEL_NAME = "slack"

ANSWERED_EVENTS = frozenset({"message", "app_mention"})
#: Message subtypes a person writes to the bot; every other subtype is bookkeeping.
_CONVERSATION_SUBTYPES = frozenset({"file_share", "thread_broadcast"})


class MalformedEvent(ValueError):
    """An event without the fields Slack always sends with a message."""


@dataclass(frozen=True, slots=True)
class SlackFile:
    id: str
    name: str
    url: str
    size: int | None
    mimetype: str
    #: An audio clip's length (Slack's `duration_ms`).
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class SlackPost:
    """One user's message to the bot, from a `message` or an `app_mention` event."""

    event_id: str | None
    event_type: str
    channel: str
    user: str
    text: str
    ts: str
    thread_ts: str | None
    channel_type: str | None
    team: str | None
    files: tuple[SlackFile, ...] = ()
    #: Who wrote the thread's parent, for a post in a thread (Slack's `parent_user_id`).
    parent_user: str | None = None

    @property
    def is_direct(self) -> bool:
        # app_mention events carry no channel_type; a DM's id starts with D.
        return self.channel_type == "im" or self.channel.startswith("D")

    @property
    def reply_thread_ts(self) -> str | None:
        """Where the answer goes: the post's thread; in a channel, a thread on the post; in a
        DM outside a thread, the conversation itself (None)."""
        if self.thread_ts is not None:
            return self.thread_ts
        return None if self.is_direct else self.ts

    @property
    def dedup_keys(self) -> tuple[str, ...]:
        post = f"slack:post:{self.channel}:{self.ts}"
        return (post, f"slack:event:{self.event_id}") if self.event_id else (post,)


def is_malformed_callback(body: object) -> bool:
    """An event callback whose event is not an object: Bolt's own middleware would fail on it."""
    if not isinstance(body, Mapping):
        return True
    return body.get("type") == "event_callback" and not isinstance(body.get("event"), Mapping)


def parse_event(body: Mapping[str, object], bot_user_id: str) -> SlackPost | None:
    """The post in an `event_callback` body, or None when it is not for the bot to answer.

    Raises `MalformedEvent` when the event lacks what every message carries.
    """
    event = body.get("event")
    if not isinstance(event, Mapping):
        raise MalformedEvent("the event callback has no event object")
    event_type = event.get("type")
    if event_type not in ANSWERED_EVENTS:
        return None
    subtype = event.get("subtype")
    if subtype is not None and (
        not isinstance(subtype, str) or subtype not in _CONVERSATION_SUBTYPES
    ):
        return None
    if event.get("bot_id"):
        return None
    user = _text_field(event, "user")
    if user == bot_user_id:
        return None
    text = event.get("text") or ""
    if not isinstance(text, str):
        raise MalformedEvent("the message text is not a string")
    files = _files(event.get("files"))
    if not text.strip() and not files:
        return None
    event_id = body.get("event_id")
    thread_ts = event.get("thread_ts")
    channel_type = event.get("channel_type")
    team = event.get("team") or body.get("team_id")
    return SlackPost(
        event_id=event_id if isinstance(event_id, str) else None,
        event_type=str(event_type),
        channel=_text_field(event, "channel"),
        user=user,
        text=text,
        ts=_ts_field(event, "ts"),
        thread_ts=thread_ts if isinstance(thread_ts, str) and thread_ts else None,
        channel_type=channel_type if isinstance(channel_type, str) else None,
        team=team if isinstance(team, str) else None,
        files=files,
        parent_user=_optional_text(event.get("parent_user_id")),
    )


def parse_change(body: Mapping[str, object], bot_user_id: str) -> InboundMessage | None:
    """A user's edit (`message_changed`) or delete (`message_deleted`) of their message, as
    the gateway takes it; None for any other event, or a change of a bot's message."""
    event = body.get("event")
    if not isinstance(event, Mapping) or event.get("type") != "message":
        return None
    subtype = event.get("subtype")
    if subtype not in ("message_changed", "message_deleted"):
        return None
    channel = _text_field(event, "channel")
    previous = event.get("previous_message")
    previous = previous if isinstance(previous, Mapping) else {}
    event_id = body.get("event_id")
    if subtype == "message_deleted":
        user = _optional_text(previous.get("user"))
        deleted_ts = _optional_text(event.get("deleted_ts"))
        if user is None or user == bot_user_id or previous.get("bot_id") or deleted_ts is None:
            return None
        return InboundMessage.deletion(CHANNEL_NAME, user, channel, deleted_ts, event_id=event_id)
    changed = event.get("message")
    if not isinstance(changed, Mapping):
        raise MalformedEvent("a message_changed event has no message")
    user = _optional_text(changed.get("user"))
    text = changed.get("text")
    if user is None or user == bot_user_id or changed.get("bot_id") or not isinstance(text, str):
        return None
    edited = changed.get("edited")
    if not isinstance(edited, Mapping) or text == previous.get("text"):
        return None  # Slack's own change (an unfurl, a reply count), not the user's edit
    ts = _ts_field(changed, "ts")
    edited_at = _optional_text(edited.get("ts")) or _optional_text(event.get("event_ts"))
    metadata: dict[str, object] = {EDIT: {"message_id": ts}, "event_id": event_id}
    previous_text = previous.get("text")
    if isinstance(previous_text, str) and previous_text:
        metadata[EDIT] = {"message_id": ts, "previous": clean_text(previous_text, bot_user_id)}
    return InboundMessage(
        channel=CHANNEL_NAME,
        sender_id=user,
        chat_id=channel,
        content=clean_text(text, bot_user_id),
        message_id=f"{ts}:edit:{edited_at}",
        metadata=metadata,
    )


def parse_reaction(body: Mapping[str, object], bot_user_id: str) -> InboundMessage | None:
    """A user's `reaction_added` to one of the bot's messages, as the gateway takes it; None
    for any other event, or a reaction to someone else's message."""
    event = body.get("event")
    if not isinstance(event, Mapping) or event.get("type") != "reaction_added":
        return None
    item = event.get("item")
    user = _optional_text(event.get("user"))
    name = _optional_text(event.get("reaction"))
    if not isinstance(item, Mapping) or item.get("type") != "message" or not user or not name:
        return None
    if event.get("item_user") != bot_user_id or user == bot_user_id:
        return None
    ts = _ts_field(item, "ts")
    emoji = _EMOJI_OF_NAME.get(name, f":{name}:")
    event_id = _optional_text(body.get("event_id"))
    return InboundMessage(
        channel=CHANNEL_NAME,
        sender_id=user,
        chat_id=_text_field(item, "channel"),
        content=reaction_note(emoji, None),
        # Slack's event id is the event's own; without one, the reaction is one per user,
        # message and emoji.
        message_id=f"reaction:{event_id or f'{ts}:{user}:{name}'}",
        metadata={REACTION: {"emoji": emoji, "message_id": ts}, "event_id": event_id},
    )


#: Slack names its emoji (`reactions.add` takes "eyes", not "👀"): the ones agents react with.
_EMOJI_NAMES = {
    "👀": "eyes",
    "👍": "+1",
    "👎": "-1",
    "✅": "white_check_mark",
    "❌": "x",
    "❤️": "heart",
    "❤": "heart",
    "🎉": "tada",
    "🙏": "pray",
    "🔥": "fire",
    "😂": "joy",
    "🤔": "thinking_face",
    "⏳": "hourglass_flowing_sand",
    "👌": "ok_hand",
    "😀": "grinning",
    "🚀": "rocket",
    "⚠️": "warning",
    "💯": "100",
}


def reaction_name(emoji: str) -> str | None:
    """Slack's name of `emoji`: a known emoji character, or a name as such (":eyes:" or
    "eyes"); None for a character Slack's name of is not known here."""
    if emoji in _EMOJI_NAMES:
        return _EMOJI_NAMES[emoji]
    name = emoji.strip(":")
    if name and all(c.isascii() and (c.isalnum() or c in "_+-'") for c in name):
        return name
    return None


#: The other way: a user's reaction named by Slack, as the character the agent reads.
_EMOJI_OF_NAME = {name: emoji for emoji, name in reversed(_EMOJI_NAMES.items())}


def _optional_text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def clean_text(text: str, bot_user_id: str) -> str:
    """What the user typed: the bot's mention removed, Slack's entities decoded."""
    without_mention = re.sub(rf"\s*<@{re.escape(bot_user_id)}(?:\|[^>]*)?>\s*", " ", text)
    decoded = without_mention.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return decoded.strip()


def to_inbound(post: SlackPost, bot_user_id: str) -> InboundMessage:
    """The bus message for one post. `message_id` is the post's `ts`, the id Slack edits,
    threads and reacts by; `metadata["thread_ts"]` is where the answer goes (None: plainly)."""
    metadata: dict[str, object] = {
        "thread_ts": post.reply_thread_ts,
        "is_dm": post.is_direct,
        "team_id": post.team,
        "event_id": post.event_id,
        "sender_user_id": post.user,
    }
    if post.thread_ts is not None and post.thread_ts != post.ts:
        from_bot = post.parent_user == bot_user_id
        metadata[REPLY_TO] = quoted(post.thread_ts, None, from_bot=from_bot)
    return InboundMessage(
        channel=CHANNEL_NAME,
        sender_id=post.user,
        chat_id=post.channel,
        content=clean_text(post.text, bot_user_id),
        timestamp=ts_to_datetime(post.ts),
        message_id=post.ts,
        metadata=metadata,
    )


def ts_to_datetime(ts: str) -> datetime:
    return datetime.fromtimestamp(float(ts), tz=UTC)


def _text_field(event: Mapping[str, object], name: str) -> str:
    value = event.get(name)
    if not isinstance(value, str) or not value:
        raise MalformedEvent(f"the event has no {name!r}")
    return value


def _ts_field(event: Mapping[str, object], name: str) -> str:
    value = _text_field(event, name)
    try:
        float(value)
    except ValueError:
        raise MalformedEvent(f"the event's {name!r} is not a Slack timestamp") from None
    return value


def _files(raw: object) -> tuple[SlackFile, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise MalformedEvent("the event's files are not a list")
    files = []
    for entry in raw:
        if not isinstance(entry, Mapping):
            raise MalformedEvent("a file of the event is not an object")
        url = entry.get("url_private_download") or entry.get("url_private")
        file_id = entry.get("id")
        if not isinstance(url, str) or not isinstance(file_id, str):
            # Files shared from elsewhere can come without a URL ("file_access": "check_file_info").
            continue
        name = entry.get("name")
        size = entry.get("size")
        mimetype = entry.get("mimetype")
        mimetype = mimetype if isinstance(mimetype, str) else ""
        if entry.get("subtype") == "slack_audio" and mimetype.startswith("video/"):
            # A voice clip recorded in Slack is an MP4 file with only a sound track.
            mimetype = "audio/" + mimetype.partition("/")[2]
        duration_ms = entry.get("duration_ms")
        files.append(
            SlackFile(
                id=file_id,
                name=name if isinstance(name, str) else file_id,
                url=url,
                size=size if isinstance(size, int) else None,
                mimetype=mimetype,
                duration_s=duration_ms / 1000 if isinstance(duration_ms, int | float) else None,
            )
        )
    return tuple(files)


# Taps on the bot's buttons: `block_actions` interaction payloads.
#: The `action_id` prefix of the buttons the bot puts under its messages.
ACTION_PREFIX = "octos-button-"


@dataclass(frozen=True, slots=True)
class SlackTap:
    """A user's tap on one of the bot's buttons, read from a `block_actions` payload."""

    message: InboundMessage
    #: The text of the message that held the button, as Slack has it (its `text` fallback):
    #: what the message keeps once its buttons are taken off.
    held_text: str


def parse_tap(body: Mapping[str, object], bot_user_id: str) -> SlackTap | None:
    """The tap in a `block_actions` body, or None when no button the bot put under its own
    message sent it (a link button, a forged or foreign payload): it reaches no agent."""
    container, message, user = body.get("container"), body.get("message"), body.get("user")
    actions = body.get("actions")
    if not (
        isinstance(container, Mapping)
        and isinstance(message, Mapping)
        and isinstance(user, Mapping)
        and isinstance(actions, list)
        and len(actions) == 1
        and isinstance(actions[0], Mapping)
    ):
        return None
    action = actions[0]
    value, action_id, action_ts = (
        action.get("value"),
        action.get("action_id"),
        action.get("action_ts"),
    )
    held_ts, chat_id = container.get("message_ts"), container.get("channel_id")
    sender = user.get("id")
    if not all(
        isinstance(field, str) and field
        for field in (value, action_id, action_ts, held_ts, chat_id, sender)
    ):
        return None
    if message.get("user") != bot_user_id or message.get("ts") != held_ts:
        return None
    label = _button_label(message.get("blocks"), str(action_id), str(value))
    if label is None:
        return None
    thread_ts = message.get("thread_ts")
    text = message.get("text")
    inbound = InboundMessage(
        channel=CHANNEL_NAME,
        sender_id=str(sender),
        chat_id=str(chat_id),
        content=label,
        # The action's timestamp is unique per tap: a redelivered payload is the same tap.
        message_id=f"tap:{held_ts}:{action_ts}",
        metadata={
            **tap_metadata(str(value), str(held_ts), float(str(held_ts))),
            "thread_ts": thread_ts if isinstance(thread_ts, str) else None,
            "sender_user_id": sender,
        },
    )
    return SlackTap(inbound, text if isinstance(text, str) else "")


def _button_label(blocks: object, action_id: str, value: str) -> str | None:
    """The label of the bot's button `action_id` holding `value` in `blocks`, or None."""
    if not action_id.startswith(ACTION_PREFIX) or not isinstance(blocks, list):
        return None
    for block in blocks:
        if not isinstance(block, Mapping) or block.get("type") != "actions":
            continue
        elements = block.get("elements")
        for element in elements if isinstance(elements, list) else ():
            if (
                isinstance(element, Mapping)
                and element.get("action_id") == action_id
                and element.get("value") == value
            ):
                text = element.get("text")
                label = text.get("text") if isinstance(text, Mapping) else None
                return label if isinstance(label, str) else value
    return None
