"""A profile's sessions as the HTTP API channel may read them."""

from __future__ import annotations

from bus import Message, SessionKey
from sessions import ActiveTopics, SessionManager


class ProfileHistory:
    """Implements `channels.api.history.ChatHistory` over the session manager."""

    def __init__(self, profile: str, sessions: SessionManager, topics: ActiveTopics) -> None:
        self._profile = profile
        self._sessions = sessions
        self._topics = topics

    def _active_key(self, channel: str, chat_id: str) -> SessionKey:
        chat = SessionKey.for_chat(self._profile, channel, chat_id)
        return chat.with_topic(self._topics.active(chat.base_key()))

    async def sessions(self, channel: str) -> list[dict[str, object]]:
        prefix = f"{self._profile}:{channel}:"
        infos = await self._sessions.list_sessions(None)
        return [
            {
                "key": str(info.key),
                "chat_id": info.key.chat_id,
                "topic": info.topic,
                "messages": info.message_count,
                "bytes": info.size,
                "updated_at": info.updated_at.isoformat(),
            }
            for info in infos
            if str(info.key).startswith(prefix)
        ]

    async def messages(self, channel: str, chat_id: str) -> list[Message]:
        return await self._sessions.history(self._active_key(channel, chat_id), None)
