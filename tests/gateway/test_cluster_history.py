"""The web chat's history on a cluster ingress: read from PostgreSQL at each request, so it
shows what the workers stored since the last one, in the chat's active topic."""

from __future__ import annotations

from pathlib import Path

from bus import Message, SessionKey
from config.store import StoreConfig
from gateway.turn.history import ProfileHistory
from sessions import SessionManager
from sessions.backends import active_topics, session_store
from tests.support.postgres import fresh_scope, postgres_dsn

__all__ = ["postgres_dsn"]  # the fixture


async def test_the_ingress_history_follows_what_workers_store(
    postgres_dsn: str, tmp_path: Path
) -> None:
    profile = fresh_scope()
    config = StoreConfig.model_validate({"backend": "postgres", "dsn": postgres_dsn})
    chat = SessionKey.for_chat(profile, "api", "web-1")
    # The store's scope is the profile: the name of its data directory, in either process.
    async with (
        session_store(config, tmp_path / "worker" / profile) as worker_store,
        session_store(config, tmp_path / "ingress" / profile, read_only=True) as ingress_store,
    ):
        worker = SessionManager(worker_store)
        history = ProfileHistory(
            profile,
            SessionManager(ingress_store),
            active_topics(config, tmp_path / "ingress" / profile, ingress_store),
            written_elsewhere=True,
        )
        await worker.append_all(chat, [Message.user("hi"), Message.assistant("hello")])
        assert [m.content for m in await history.messages("api", "web-1")] == ["hi", "hello"]
        await worker.append_all(chat, [Message.user("more")])
        assert [m.content for m in await history.messages("api", "web-1")] == [
            "hi",
            "hello",
            "more",
        ]
        await active_topics(config, tmp_path / "worker" / profile, worker_store).switch(
            chat.base_key(), "work"
        )
        await worker.append_all(chat.with_topic("work"), [Message.user("in work")])
        assert [m.content for m in await history.messages("api", "web-1")] == ["in work"]
