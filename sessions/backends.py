"""Which session store a profile gets: the JSONL files (default) or PostgreSQL (`store:`),
and the chats' active topics kept beside it.

PostgreSQL's module (and asyncpg) is imported only when a configuration asks for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from config.store import StoreConfig
from sessions.errors import SessionError
from sessions.store import SessionStore, SessionStoreProtocol
from sessions.topics import ActiveTopics, ActiveTopicsStore

if TYPE_CHECKING:
    from sessions.postgres import PostgresSessionStore


class StoreBackendMissing(SessionError):
    """`store: postgres` without asyncpg installed."""

    def __init__(self, missing: str) -> None:
        super().__init__(
            f"store backend postgres needs asyncpg (no module {missing!r}); install it with "
            "pip install 'octos-gateway[postgres]'"
        )


def _postgres() -> type[PostgresSessionStore]:
    try:
        from sessions.postgres import PostgresSessionStore
    except ModuleNotFoundError as error:
        raise StoreBackendMissing(error.name or "asyncpg") from error
    return PostgresSessionStore


def session_store(
    config: StoreConfig,
    root: Path,
    *,
    read_only: bool = False,
    jsonl: Callable[[], SessionStore] | None = None,
) -> SessionStoreProtocol:
    """The store of the profile whose data directory is `root` (its name is the profile id).

    `jsonl` builds the file store with the caller's options (the daemon's fsync policy and
    size cap); by default a plain one.
    """
    if config.backend == "postgres":
        assert config.dsn is not None  # the config model requires it with this backend
        return _postgres()(
            config.dsn.get_secret_value(),
            root.name,
            read_only=read_only,
            pool_size=config.pool_size,
            connect_timeout_s=config.connect_timeout_s,
        )
    if jsonl is not None:
        return jsonl()
    return SessionStore(root, read_only=read_only)


def active_topics(
    config: StoreConfig, root: Path, store: SessionStoreProtocol
) -> ActiveTopicsStore:
    """Where the profile's chats keep their active topic: beside its sessions, `store` (the
    table of the same database with PostgreSQL, so every cluster worker sees a switch made by
    another; else the file in `root`)."""
    if config.backend != "postgres":
        return ActiveTopics(root)
    from sessions.postgres.topics import PostgresActiveTopics

    return PostgresActiveTopics(postgres_store(store))


def postgres_store(store: SessionStoreProtocol) -> PostgresSessionStore:
    """`store` as the PostgreSQL store it must be (the configuration says `backend: postgres`)."""
    postgres = _postgres()
    if not isinstance(store, postgres):
        raise TypeError(f"store backend postgres needs its PostgresSessionStore, not {store!r}")
    return store


async def check_store(config: StoreConfig) -> None:
    """Reach the configured database and create its schema; StoreUnavailable when it cannot."""
    if config.backend != "postgres":
        return
    assert config.dsn is not None
    async with _postgres()(
        config.dsn.get_secret_value(), "", pool_size=1, connect_timeout_s=config.connect_timeout_s
    ):
        pass


async def stored_profiles(config: StoreConfig, data_dir: Path) -> dict[str, Path]:
    """Each profile with stored sessions, and its data directory (`{data_dir}/{profile}`)."""
    if config.backend != "postgres":
        return await asyncio.to_thread(_profile_dirs, data_dir)
    assert config.dsn is not None
    async with _postgres()(
        config.dsn.get_secret_value(),
        "",
        read_only=True,
        pool_size=1,
        connect_timeout_s=config.connect_timeout_s,
    ) as store:
        return {scope: data_dir / scope for scope in await store.scopes()}


def _profile_dirs(data_dir: Path) -> dict[str, Path]:
    if not data_dir.is_dir():
        return {}
    return {path.name: path for path in sorted(data_dir.iterdir()) if path.is_dir()}
