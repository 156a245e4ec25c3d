"""`PostgresActiveTopics`: each chat's active topic in `octos_active_topics`, shared by every
process using the database.

A chat's messages are answered by whichever cluster worker holds its partition, so `/new work`
answered by one worker must be what the next worker reads: the state lives only in the table
(nothing cached), and a change locks the chat's row, applies the step and commits before the
reply is given; in a cluster worker, in one transaction with the stored reply
(`PostgresSessionStore.transaction`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import asyncpg

from sessions.postgres.store import PostgresSessionStore
from sessions.topics import ActiveTopicsStore, ChatTopics

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

_STATE: Final = (
    "SELECT active, previous, agent FROM octos_active_topics WHERE scope = $1 AND base_key = $2"
)
_ROW: Final = """
INSERT INTO octos_active_topics (scope, base_key) VALUES ($1, $2)
ON CONFLICT (scope, base_key) DO NOTHING
"""
_SET: Final = """
UPDATE octos_active_topics SET active = $3, previous = $4, agent = $5, updated_at = now()
WHERE scope = $1 AND base_key = $2
"""


_IMPORT: Final = """
INSERT INTO octos_active_topics (scope, base_key, active, previous, agent)
SELECT $1, item.base_key, item.active, item.previous, item.agent
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
    AS item(base_key, active, previous, agent)
ON CONFLICT (scope, base_key) DO NOTHING
"""


async def import_topics(connection: Connection, scope: str, chats: dict[str, ChatTopics]) -> int:
    """Copy a profile's topics file in (`store migrate`); how many chats were new. A chat that
    has a row already keeps it: a daemon on PostgreSQL switched it since, which is newer."""
    if not chats:
        return 0
    status = await connection.execute(
        _IMPORT,
        scope,
        list(chats),
        [state.active for state in chats.values()],
        [state.previous for state in chats.values()],
        [state.agent for state in chats.values()],
    )
    return int(status.rsplit(" ", 1)[-1])  # "INSERT 0 <rows>"


class PostgresActiveTopics(ActiveTopicsStore):
    """The topics of the profile `store.scope`, over the session store's pool."""

    def __init__(self, store: PostgresSessionStore) -> None:
        self._store = store

    async def state(self, base_key: str) -> ChatTopics:
        if not self._store.has_tables:
            return ChatTopics()  # a read-only look at a database no worker has set up yet
        async with self._store.connection(writes=False) as connection:
            try:
                row = await connection.fetchrow(_STATE, self._store.scope, base_key)
            except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError):
                # A reader (an ingress) older than the workers' migration: nothing switched yet.
                return ChatTopics()
        return ChatTopics() if row is None else _chat_topics(row)

    async def change(self, base_key: str, step: Callable[[ChatTopics], ChatTopics]) -> ChatTopics:
        scope = self._store.scope
        async with self._store.connection() as connection, connection.transaction():
            await connection.execute(_ROW, scope, base_key)
            row = await connection.fetchrow(_STATE + " FOR UPDATE", scope, base_key)
            assert row is not None  # inserted above, or there already
            before = _chat_topics(row)
            after = step(before)
            if after != before:
                await connection.execute(
                    _SET, scope, base_key, after.active, after.previous, after.agent
                )
        return after


def _chat_topics(row: asyncpg.Record) -> ChatTopics:
    return ChatTopics(row["active"], row["previous"], row["agent"])
