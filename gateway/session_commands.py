"""`octos-gateway sessions list|show|export`: read sessions from the data directory."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from bus import Message, SessionKey
from config import ConfigError, default_config, load_gateway
from gateway.cli_args import add_location_arguments, plural
from gateway.env_file import environment_for
from sessions import Session, SessionStore

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_INVALID_CONFIG = 2
KEY_FORM = (
    "{key!r} is not a session key; keys look like PROFILE:CHANNEL:CHAT_ID or "
    "PROFILE:CHANNEL:CHAT_ID#TOPIC, e.g. default:api:web-1a2b3c4d (`octos-gateway sessions "
    "list` shows them)"
)


def add_session_commands(commands: Any) -> None:
    sessions = commands.add_parser(
        "sessions",
        help="list, show or export sessions",
        description="Read the sessions in the data directory (no running daemon needed).",
    )
    sessions.add_argument("-c", "--config", type=Path, help="gateway.yaml (for its data_dir)")
    sessions.add_argument("--data-dir", type=Path, help="the data directory (overrides -c)")
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every session: key, messages, size, last update")
    listing.add_argument("--profile", help="only this profile's sessions")
    add_location_arguments(listing, nested=True)
    listing.set_defaults(func=cmd_list)

    show = actions.add_parser("show", help="print one session's messages")
    show.add_argument("key", help="session key, e.g. default:api:alice or work:telegram:1#topic")
    add_location_arguments(show, nested=True)
    show.set_defaults(func=cmd_show)

    export = actions.add_parser("export", help="write one session as JSONL or Markdown")
    export.add_argument("key", help="session key")
    export.add_argument("--format", choices=("jsonl", "markdown"), default="jsonl")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    add_location_arguments(export, nested=True)
    export.set_defaults(func=cmd_export)


def data_dir_of(args: argparse.Namespace) -> Path:
    if args.data_dir is not None:
        return Path(args.data_dir)
    loaded = (
        load_gateway(args.config, environment_for(args.config)) if args.config else default_config()
    )
    return Path(loaded.gateway.data_dir)


def profile_roots(data_dir: Path) -> dict[str, Path]:
    """Each profile keeps its sessions in `{data_dir}/{profile}/`."""
    if not data_dir.is_dir():
        return {}
    return {path.name: path for path in sorted(data_dir.iterdir()) if path.is_dir()}


async def list_sessions(data_dir: Path, only_profile: str | None) -> list[str]:
    lines = []
    for profile, root in profile_roots(data_dir).items():
        if only_profile and profile != only_profile:
            continue
        async with SessionStore(root, read_only=True) as store:
            for info in await store.list():
                lines.append(
                    f"{info.key}\t{plural(info.message_count, 'message')}\t{info.size} bytes\t"
                    f"{info.updated_at.isoformat(timespec='seconds')}"
                )
    return lines


async def load_session(data_dir: Path, text: str) -> Session | None:
    key = SessionKey.parse(text)
    profiles = profile_roots(data_dir)
    candidates = [key.profile] if key.profile else list(profiles)
    for profile in candidates:
        root = profiles.get(profile or "")
        if root is None:
            continue
        async with SessionStore(root, read_only=True) as store:
            session = await store.load(key)
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
    try:
        data_dir = data_dir_of(args)
    except ConfigError as error:
        for problem in error.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID_CONFIG, None
    try:
        session = asyncio.run(load_session(data_dir, args.key))
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
    try:
        data_dir = data_dir_of(args)
    except ConfigError as error:
        for problem in error.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    if args.profile and args.profile not in (known := profile_roots(data_dir)):
        names = ", ".join(known) or "none"
        print(
            f"error: no profile {args.profile!r} in {data_dir} (profiles with data: {names})",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    lines = asyncio.run(list_sessions(data_dir, args.profile))
    print("\n".join(lines) if lines else f"no sessions in {data_dir}")
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
