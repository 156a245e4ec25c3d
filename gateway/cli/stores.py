"""`octos-gateway store migrate --from jsonl --to postgres -c gateway.yaml`, and the start-up
check that the configured PostgreSQL answers (`run` exits 69 when it does not).

The migration copies the live session of every profile and topic (and with `--archives` the
archived and compacted history too), each chat's active topic and the senders approved by
pairing into the database named by gateway.yaml's `store.dsn`.
Each file is one transaction, recorded as copied: a second run copies nothing, a killed run
continues where it stopped. The files are only read, never changed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bus import SessionKey
from channels.access.allow import AllowOverlay
from config import LoadedConfig
from config.store import StoreConfig
from gateway.cli.args import (
    EXIT_INVALID_CONFIG,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_UNAVAILABLE,
    CommandSet,
    add_config_argument,
    load_config,
    plural,
)
from sessions import ActiveTopics, Session, SessionStore
from sessions.backends import check_store, stored_profiles
from sessions.errors import SessionError
from sessions.layout import SESSION_SUFFIX
from sessions.meta import read_meta_line
from sessions.recovery import load_file

if TYPE_CHECKING:
    from sessions.postgres.importing import Imported

_ARCHIVE_SUFFIXES = (f".archived{SESSION_SUFFIX}", f".archive{SESSION_SUFFIX}")


def add_store_commands(commands: CommandSet) -> None:
    store = commands.add_group(
        "store",
        help="move sessions between stores",
        description="Work on the session store as a whole.",
    )
    migrate = store.add(
        "migrate",
        cmd_migrate,
        help="copy the session files into PostgreSQL (idempotent, resumable)",
    )
    migrate.add_argument("--from", dest="source", choices=("jsonl",), required=True)
    migrate.add_argument("--to", dest="target", choices=("postgres",), required=True)
    add_config_argument(migrate)
    migrate.add_argument("--data-dir", type=Path, help="the data directory (overrides -c)")
    migrate.add_argument("--profile", help="only this profile's sessions")
    migrate.add_argument(
        "--archives", action="store_true", help="also copy archived and compacted history"
    )


def store_unreachable(loaded: LoadedConfig) -> str | None:
    """Why the configured session store cannot be used, None when it can (or is the files)."""
    try:
        asyncio.run(check_store(loaded.gateway.store))
    except SessionError as error:
        return str(error)
    return None


@dataclass(slots=True)
class Counts:
    """One run's tally, a field per outcome."""

    copied: int = 0
    messages: int = 0
    already: int = 0
    caught_up: int = 0
    archives: int = 0
    topics: int = 0
    approved: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, source: str, session: Session, archive: bool, result: Imported) -> None:
        from sessions.postgres.importing import Copied  # asyncpg: only when migrating

        self.messages += result.messages
        if result.outcome is Copied.COPIED:
            self.copied += not archive
            self.archives += archive
            _say(f"copied {source} ({plural(len(session.messages), 'message')})")
        elif result.outcome is Copied.CAUGHT_UP:
            self.caught_up += 1
            _say(f"caught up {source} ({plural(result.messages, 'new message')})")
        elif result.outcome is Copied.ALREADY:
            self.already += 1
        elif result.outcome is Copied.CONFLICT:
            self.problems.append(
                f"{source}: session {session.key} {result.outcome}; left alone (it was written "
                "there by a daemon running on PostgreSQL)"
            )
        else:
            self.problems.append(
                f"{source}: session {session.key} {result.outcome}; its new messages were not "
                "copied (compare `sessions show` with the file)"
            )

    def summary(self) -> str:
        text = (
            f"{plural(self.copied, 'session')} copied, {self.already} already copied, "
            f"{self.caught_up} caught up ({plural(self.messages, 'message')} written)"
        )
        if self.archives:
            text += f", {plural(self.archives, 'archive')} copied"
        if self.topics:
            text += f", the active topic of {plural(self.topics, 'chat')} copied"
        if self.approved:
            text += f", {plural(self.approved, 'sender')} approved by pairing copied"
        return text + f", {plural(len(self.problems), 'problem')}"


def _say(line: str) -> None:
    print(line, flush=True)  # progress of a long run, line by line


async def migrate(
    data_dir: Path, config: StoreConfig, *, archives: bool, only_profile: str | None
) -> Counts:
    from channels.access.postgres_pairing import import_approved
    from sessions.postgres import PostgresSessionStore
    from sessions.postgres.importing import import_session
    from sessions.postgres.topics import import_topics

    assert config.dsn is not None
    counts = Counts()
    profiles = await stored_profiles(StoreConfig(), data_dir)
    async with (
        PostgresSessionStore(
            config.dsn.get_secret_value(), "", connect_timeout_s=config.connect_timeout_s
        ) as target,
        target.connection() as connection,
    ):
        for profile, root in profiles.items():
            if only_profile and profile != only_profile:
                continue
            found: list[tuple[str, Session, str | None]] = []
            async with SessionStore(root, read_only=True) as files:
                for info in await files.list():
                    try:
                        session = await files.load(info.key)
                    except SessionError as error:
                        counts.problems.append(f"{info.path}: {error}")
                        continue
                    if session is not None:
                        found.append((_source(root, Path(info.path)), session, None))
            if archives:
                for path, session in await asyncio.to_thread(_archived_sessions, root):
                    found.append((_source(root, path), session, "archived file"))
            for source, session, archived in found:
                result = await import_session(
                    connection, profile, source, session, archived=archived
                )
                counts.add(source, session, archived is not None, result)
            topics = ActiveTopics(root)
            await topics.load()
            counts.topics += await import_topics(connection, profile, topics.chats())
            approved = await asyncio.to_thread(AllowOverlay(root).entries)
            counts.approved += await import_approved(connection, profile, approved)
    return counts


def _source(root: Path, path: Path) -> str:
    """A file's name in the record of copied files: profile and path below its directory."""
    return f"{root.name}/{path.relative_to(root).as_posix()}"


def _archived_sessions(root: Path) -> list[tuple[Path, Session]]:
    """Archived and compacted session files under one profile (blocking: lists and reads)."""
    found = []
    for path in sorted(root.glob(f"users/*/sessions/*{SESSION_SUFFIX}")):
        if not path.name.endswith(_ARCHIVE_SUFFIXES):
            continue
        with path.open("rb") as file:
            first = file.readline().rstrip(b"\n")
        meta = read_meta_line(first, path)
        if meta is None:
            continue
        key = SessionKey.parse(meta.session_key)
        loaded = load_file(path, key, name_was_cut=True, repair=False)
        if loaded is not None:
            found.append((path, Session(key, loaded.meta, loaded.messages)))
    return found


def cmd_migrate(args: argparse.Namespace) -> int:
    """Copy every profile's session files into the PostgreSQL database of gateway.yaml's
    store.dsn. Safe to run again: what was copied is skipped."""
    loaded = load_config(args.config)
    if loaded is None:
        return EXIT_INVALID_CONFIG
    store = loaded.gateway.store
    if store.dsn is None:
        print(
            f"error: {args.config} names no PostgreSQL database: add "
            "`store: {backend: postgres, dsn: postgresql://user:password@host:5432/db}`",
            file=sys.stderr,
        )
        return EXIT_INVALID_CONFIG
    data_dir = Path(args.data_dir) if args.data_dir is not None else loaded.gateway.data_dir
    try:
        counts = asyncio.run(
            migrate(data_dir, store, archives=args.archives, only_profile=args.profile)
        )
    except SessionError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    for issue in counts.problems:
        print(f"problem: {issue}", file=sys.stderr)
    _say(f"store migrate {data_dir} -> {store.redacted_dsn}: {counts.summary()}")
    return EXIT_PROBLEMS if counts.problems else EXIT_OK
