"""A profile's sessions as the HTTP API channel may read them."""

from __future__ import annotations

from bus import Message, SessionKey
from channels.base import HistoryUnavailable
from sessions import SessionManager
from sessions.errors import SessionError, UnsupportedSessionSchema
from sessions.topics import ActiveTopicsStore


class ProfileHistory:
    """Implements `channels.base.ChatHistory` over the session manager."""

    def __init__(
        self,
        profile: str,
        sessions: SessionManager,
        topics: ActiveTopicsStore,
        *,
        written_elsewhere: bool = False,
    ) -> None:
        """`written_elsewhere`: other processes write the sessions (a cluster ingress reads
        what the workers store), so each read goes to the store, not to memory."""
        self._profile = profile
        self._sessions = sessions
        self._topics = topics
        self._written_elsewhere = written_elsewhere

    async def _active_key(self, channel: str, chat_id: str) -> SessionKey:
        chat = SessionKey.for_chat(self._profile, channel, chat_id)
        return chat.with_topic(await self._topics.active(chat.base_key()))

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
        key = await self._active_key(channel, chat_id)
        if self._written_elsewhere:
            self._sessions.evict_chat(key.base_key())
        try:
            return await self._sessions.history(key, None)
        except UnsupportedSessionSchema as error:
            # The client is told why, without the server's paths.
            raise HistoryUnavailable(
                f"this chat's session file has schema_version {error.found}; this build reads "
                f"{error.supported} or older: upgrade octos-gateway to read it"
            ) from error
        except SessionError as error:
            raise HistoryUnavailable(f"this chat's session cannot be read: {error}") from error
