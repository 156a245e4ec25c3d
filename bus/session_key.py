"""Session keys: which conversation a message belongs to.

Four text forms, all readable by `SessionKey.parse` and written back by `str(key)`:

    channel:chat_id                  telegram:12345
    profile:channel:chat_id          work:telegram:12345
    channel:chat_id#topic            telegram:12345#research
    profile:channel:chat_id#topic    work:telegram:12345#research

A three-part key is told apart from a chat id that contains colons (`discord:guild:123`) by the
known channel names: only when the first part is not a channel and the second is does the first
part name a profile.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

MAIN_PROFILE = "_main"

#: Every channel type this project ships, plus octos' internal ones. Octos' own list missed
#: line, lark and wechat, so their profiled keys were misread as chat ids.
KNOWN_CHANNELS: frozenset[str] = frozenset(
    {
        "api",
        "cli",
        "discord",
        "email",
        "feishu",
        "lark",
        "line",
        "local",
        "matrix",
        "qq-bot",
        "slack",
        "system",
        "telegram",
        "test",
        "twilio",
        "wechat",
        "wecom",
        "wecom-bot",
        "whatsapp",
    }
)


def is_channel_name(name: str) -> bool:
    return name in KNOWN_CHANNELS


class SessionKey(NamedTuple):
    """Which conversation: a value, hashed and compared as a tuple (in C: a turn looks its
    session up by key several times)."""

    channel: str
    chat_id: str
    profile: str | None = None
    topic_name: str | None = None

    @classmethod
    def for_chat(
        cls, profile: str | None, channel: str, chat_id: str, topic: str | None = None
    ) -> SessionKey:
        return cls(channel=channel, chat_id=chat_id, profile=profile, topic_name=topic or None)

    @classmethod
    def parse(cls, text: str) -> SessionKey:
        base, sep, topic = text.partition("#")
        parts = base.split(":", 2)
        if len(parts) == 3 and not is_channel_name(parts[0]) and is_channel_name(parts[1]):
            profile, channel, chat_id = parts
            return cls(channel, chat_id, profile, topic if sep else None)
        channel, colon, chat_id = base.partition(":")
        if not colon:
            raise ValueError(f"session key {text!r} has no ':'; expected channel:chat_id")
        return cls(channel, chat_id, None, topic if sep else None)

    def base_key(self) -> str:
        """The key without its topic: every topic of one chat shares this."""
        if self.profile is None:
            return f"{self.channel}:{self.chat_id}"
        return f"{self.profile}:{self.channel}:{self.chat_id}"

    def topic(self) -> str | None:
        return self.topic_name

    def with_topic(self, topic: str | None) -> SessionKey:
        return SessionKey(self.channel, self.chat_id, self.profile, topic or None)

    def __str__(self) -> str:
        base = self.base_key()
        return base if self.topic_name is None else f"{base}#{self.topic_name}"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        from_text = core_schema.no_info_after_validator_function(
            cls.parse, core_schema.str_schema()
        )
        return core_schema.json_or_python_schema(
            json_schema=from_text,
            python_schema=core_schema.union_schema(
                [core_schema.is_instance_schema(cls), from_text]
            ),
            serialization=core_schema.to_string_ser_schema(),
        )
