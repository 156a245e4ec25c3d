"""`octos-gateway sessions list|show|export`: read sessions from the data directory."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

from bus import Message, SessionKey
from config.store import StoreConfig
from gateway.cli.args import (
    EXIT_INVALID_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_OK,
    CommandSet,
    located,
    plural,
)
from sessions import Session
from sessions.backends import session_store, stored_profiles
from sessions.errors import SessionError

KEY_FORM = (
    "{key!r} is not a session key; keys look like PROFILE:CHANNEL:CHAT_ID or "
    "PROFILE:CHANNEL:CHAT_ID#TOPIC, e.g. default:api:web-1a2b3c4d (`octos-gateway sessions "
    "list` shows them)"
)


def add_session_commands(commands: CommandSet) -> None:
    sessions = commands.add_group(
        "sessions",
        help="list, show or export sessions",
        description="Read the sessions in the data directory (no running daemon needed).",
        located=True,
    )
    listing = sessions.add("list", cmd_list, help="every session: key, messages, size, last update")
    listing.add_argument("--profile", help="only this profile's sessions")

    show = sessions.add("show", cmd_show, help="print one session's messages")
    show.add_argument("key", help="session key, e.g. default:api:alice or work:telegram:1#topic")

    export = sessions.add("export", cmd_export, help="write one session as JSONL or Markdown")
    export.add_argument("key", help="session key")
    export.add_argument("--format", choices=("jsonl", "markdown"), default="jsonl")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")


async def list_sessions(
    data_dir: Path, only_profile: str | None, store: StoreConfig | None = None
) -> list[str]:
    store = store or StoreConfig()
    lines = []
    for profile, root in (await stored_profiles(store, data_dir)).items():
        if only_profile and profile != only_profile:
            continue
        async with session_store(store, root, read_only=True) as opened:
            for info in await opened.list():
                lines.append(
                    f"{display_key(info.key)}\t{plural(info.message_count, 'message')}\t"
                    f"{info.size} bytes\t"
                    f"{info.updated_at.isoformat(timespec='seconds')}"
                )
    return lines


def display_key(key: SessionKey) -> str:
    """The key as `list` prints it and `show` reads it back: a `#` inside the chat id (which
    would read as the start of a topic) is written `%23`, and `%` there as `%25`."""
    if "#" not in key.chat_id:
        return str(key)
    chat_id = key.chat_id.replace("%", "%25").replace("#", "%23")
    return str(SessionKey.for_chat(key.profile, key.channel, chat_id, key.topic()))


def key_readings(text: str) -> list[SessionKey]:
    """The keys `text` can name: as written, then with `%23`/`%25` in the chat id decoded."""
    key = SessionKey.parse(text)
    readings = [key]
    if "%" in key.chat_id:
        chat_id = _ESCAPED.sub(lambda found: _UNESCAPED[found.group(0)], key.chat_id)
        readings.append(SessionKey.for_chat(key.profile, key.channel, chat_id, key.topic()))
    return readings


_ESCAPED = re.compile("%23|%25")
_UNESCAPED = {"%23": "#", "%25": "%"}


async def load_session(
    data_dir: Path, text: str, store: StoreConfig | None = None
) -> Session | None:
    store = store or StoreConfig()
    profiles = await stored_profiles(store, data_dir)
    for key in key_readings(text):
        candidates = [key.profile] if key.profile else list(profiles)
        for profile in candidates:
            root = profiles.get(profile or "")
            if root is None:
                continue
            async with session_store(store, root, read_only=True) as opened:
                session = await opened.load(key)
            if session is not None:
                return session
    return None


def as_markdown(session: Session) -> str:
    title = session.meta.title or str(session.key)
    lines = [f"# {title}", "", f"Session `{session.key}`", ""]
    for message in session.messages:
        stamp = message.timestamp.isoformat(timespec="seconds")
        lines += [f"## {message.role.value} ({stamp})", "", message.content, ""]
    return "\n".join(lines)


def as_jsonl(session: Session) -> str:
    head = json.dumps(session.meta.to_dict(), ensure_ascii=False)
    return "\n".join([head, *(message.to_json() for message in session.messages)]) + "\n"


def _find(args: argparse.Namespace) -> tuple[int, Session | None]:
    if (location := located(args)) is None:
        return EXIT_INVALID_CONFIG, None
    data_dir, store = location
    try:
        session = asyncio.run(load_session(data_dir, args.key, store))
    except SessionError as error:
        # A file this build cannot read (newer schema_version, a key collision): the message
        # names the file and what was found there.
        print(f"error: {error}", file=sys.stderr)
        return EXIT_NOT_FOUND, None
    except ValueError:
        print(f"error: {KEY_FORM.format(key=args.key)}", file=sys.stderr)
        return EXIT_NOT_FOUND, None
    if session is None:
        print(
            f"error: no session {args.key!r} in {data_dir}; "
            "`octos-gateway sessions list` shows the keys",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND, None
    return EXIT_OK, session


def cmd_list(args: argparse.Namespace) -> int:
    if (location := located(args)) is None:
        return EXIT_INVALID_CONFIG
    data_dir, store = location
    where = store.redacted_dsn if store.backend == "postgres" else str(data_dir)
    try:
        known = asyncio.run(stored_profiles(store, data_dir))
    except (SessionError, OSError) as error:
        print(f"error: cannot list the sessions in {where}: {error}", file=sys.stderr)
        return EXIT_NOT_FOUND
    if args.profile and args.profile not in known:
        names = ", ".join(known) or "none"
        print(
            f"error: no profile {args.profile!r} in {where} (profiles with data: {names})",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    try:
        lines = asyncio.run(list_sessions(data_dir, args.profile, store))
    except (ValueError, SessionError, OSError) as error:
        print(f"error: cannot list the sessions in {where}: {error}", file=sys.stderr)
        return EXIT_NOT_FOUND
    print("\n".join(lines) if lines else f"no sessions in {where}")
    return EXIT_OK


def _line(message: Message) -> str:
    stamp = message.timestamp.isoformat(timespec="seconds")
    return f"[{stamp}] {message.role.value}: {message.content}"


def cmd_show(args: argparse.Namespace) -> int:
    status, session = _find(args)
    if session is not None:
        print("\n".join(_line(message) for message in session.messages))
    return status


def cmd_export(args: argparse.Namespace) -> int:
    status, session = _find(args)
    if session is None:
        return status
    text = as_markdown(session) if args.format == "markdown" else as_jsonl(session)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return EXIT_OK
