"""Chat commands: topics (`/new`, `/s`, `/sessions`, `/back`, `/delete`), `/reset`, `/status`,
`/agent` (which of the profile's agents the chat talks to).

Which text is a command (its name, its aliases) and which commands are answered at once is
decided by the turn core's triage (`gateway.turn.triage`); this runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from bus import SessionKey
from gateway.services import ProfileServices
from gateway.turn.triage import AgentRoutes
from sessions import validate_topic_name

HELP_TEXT = """Commands:
/new [name] - start a new session (keeps the last few messages as context)
/s NAME, /switch NAME - switch to a session
/sessions - list your sessions
/back, /b - back to the previous session
/delete NAME, /d NAME - delete a session (its history is archived)
/reset - clear the current session (its history is archived)
/status - what the bot is doing
/agent [name] - list the agents, or talk to another one
/stop - cancel the running reply
/help - this list"""


@dataclass(frozen=True, slots=True)
class ChatStatus:
    busy: bool
    queue_mode: str
    agent: str


class Commands:
    """Executes commands for one profile; returns the reply text."""

    def __init__(self, services: ProfileServices) -> None:
        self._sessions = services.sessions
        self._topics = services.topics
        self._fork_copy = services.config.sessions.fork_copy
        self._routes = AgentRoutes(services.config)

    async def current_key(self, chat: SessionKey) -> SessionKey:
        topic = await self._topics.active(chat.base_key())
        if (topic or None) == chat.topic_name:
            return chat  # what `with_topic` would build: the key is frozen, so the same key
        return chat.with_topic(topic)

    async def run(
        self, chat: SessionKey, name: str, argument: str, *, status: ChatStatus | None = None
    ) -> str:
        """The reply to a command; `/status` reports `status` (what the dispatcher knows)."""
        if name == "/status":
            return await self._status(chat, status or ChatStatus(False, "?", "?"))
        handler = {
            "/new": self._new,
            "/s": self._switch,
            "/sessions": self._list,
            "/back": self._back,
            "/delete": self._delete,
            "/reset": self._reset,
            "/agent": self._agent,
        }.get(name)
        if handler is None:
            return HELP_TEXT if name == "/help" else f"Unknown command {name}.\n\n{HELP_TEXT}"
        return await handler(chat, argument)

    async def _topic_names(self, chat: SessionKey) -> dict[str | None, int]:
        infos = await self._sessions.list_sessions(chat.base_key())
        return {info.topic: info.message_count for info in infos}

    async def _activate(self, chat: SessionKey, topic: str | None) -> None:
        await self._topics.switch(chat.base_key(), topic)

    async def _new(self, chat: SessionKey, name: str) -> str:
        topic = name or datetime.now(UTC).strftime("s%m%d-%H%M%S")
        try:
            validate_topic_name(topic)
        except ValueError as error:
            return f"Cannot use that name: {error}"
        if topic in await self._topic_names(chat):
            return f"A session named {topic!r} exists already; /s {topic} switches to it."
        parent = await self.current_key(chat)
        session = await self._sessions.fork(parent, chat.with_topic(topic), self._fork_copy)
        await self._activate(chat, topic)
        kept = len(session.messages)
        if not kept:
            return f"New session {topic!r} (no earlier messages to keep)."
        noun = "message" if kept == 1 else f"{kept} messages"
        return f"New session {topic!r} (kept the last {noun} as context)."

    async def _switch(self, chat: SessionKey, name: str) -> str:
        if not name:
            return await self._list(chat, "")
        topic = None if name.lower() == "default" else name
        if topic not in await self._topic_names(chat) and topic is not None:
            return f"No session named {name!r}. /new {name} creates it."
        await self._activate(chat, topic)
        recent = await self._sessions.history(chat.with_topic(topic), 2)
        preview = "".join(f"\n{message.role.value}: {message.content[:100]}" for message in recent)
        return f"Switched to {name!r}.{preview}"

    async def _list(self, chat: SessionKey, _argument: str) -> str:
        topics = await self._topic_names(chat)
        active = await self._topics.active(chat.base_key())
        topics.setdefault(active, 0)
        lines = [
            f"{'*' if topic == active else '-'} {topic or 'default'} ({count} messages)"
            for topic, count in sorted(topics.items(), key=lambda item: item[0] or "")
        ]
        return "Sessions (* = active):\n" + "\n".join(lines)

    async def _back(self, chat: SessionKey, _argument: str) -> str:
        previous = await self._topics.back(chat.base_key())
        return f"Back to {previous or 'default'!r}."

    async def _delete(self, chat: SessionKey, name: str) -> str:
        if not name or name.lower() == "default":
            return "Name the session to delete (the default session cannot be deleted)."
        if name not in await self._topic_names(chat):
            return f"No session named {name!r}."
        await self._sessions.delete(chat.with_topic(name))
        await self._topics.forget(chat.base_key(), name)
        return f"Deleted {name!r} (its history is archived)."

    async def _reset(self, chat: SessionKey, _argument: str) -> str:
        await self._sessions.reset(await self.current_key(chat))
        return "Session cleared (the old history is archived)."

    async def _agent(self, chat: SessionKey, name: str) -> str:
        routes = self._routes
        chosen = (await self._topics.state(chat.base_key())).agent
        if not name:
            listed = "\n".join(
                f"{'*' if agent == chosen else '-'} {agent}" for agent in routes.names
            )
            if not routes.switchable:
                return f"Agents of this bot:\n{listed}\nWhich one answers is set by its routes."
            return (
                f"Agents (* = this chat's choice):\n{listed}\n"
                "/agent NAME talks to another; /agent routes goes back to the bot's routes."
            )
        if not routes.switchable:
            return "This bot does not let a chat choose its agent (agent_switch is off)."
        if name == "routes":
            await self._topics.choose_agent(chat.base_key(), None)
            return "This chat is answered by the agent its routes give again."
        if name not in routes.names:
            return f"No agent named {name!r}. Agents: {', '.join(routes.names)}."
        await self._topics.choose_agent(chat.base_key(), name)
        return f"This chat now talks to {name!r}."

    async def _status(self, chat: SessionKey, status: ChatStatus) -> str:
        key = await self.current_key(chat)
        count = len(await self._sessions.history(key, None))
        state = "answering" if status.busy else "idle"
        return (
            f"Session: {key.topic() or 'default'} ({count} messages)\n"
            f"State: {state}\nAgent: {status.agent}\nQueue mode: {status.queue_mode}"
        )
