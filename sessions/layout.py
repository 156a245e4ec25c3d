"""Where each session lives on disk: the per-user layout, octos' legacy flat layout, side files.

    {root}/users/{enc(base_key)}/sessions/{enc(topic or "default")}.jsonl   live session
    {root}/users/.../sessions/{topic}.jsonl.torn | .corrupt              quarantined lines
    {root}/users/.../sessions/{topic}.{n}.archive.jsonl                  compacted history
    {root}/users/.../sessions/{topic}.{UTC stamp}.archived.jsonl         reset / deleted session
    {root}/users/.../sessions/.migrated.{topic}                          legacy migration done
    {root}/sessions/{enc(key)}[_{FNV-1a hex}].jsonl                      octos' legacy layout

Encoded names contain only `[A-Za-z0-9_%-]`, so a live session's stem never has a dot: every
side file has one, and listings tell them apart by that alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from bus import SessionKey, is_channel_name
from sessions.encoding import bounded_name, decode_component, is_cut_name

SESSION_SUFFIX: Final = ".jsonl"
DEFAULT_TOPIC_STEM: Final = "default"
# Stems no encoding produces: an explicit topic named "default" must not share the file of the
# default session, and an empty topic must not make a hidden ".jsonl".
_TOPIC_NAMED_DEFAULT_STEM: Final = "%64efault"
_EMPTY_TOPIC_STEM: Final = "%"


def topic_stem(topic: str | None) -> str:
    if topic is None:
        return DEFAULT_TOPIC_STEM
    if topic == "":
        return _EMPTY_TOPIC_STEM
    name = bounded_name(topic)
    return _TOPIC_NAMED_DEFAULT_STEM if name == DEFAULT_TOPIC_STEM else name


def topic_of_stem(stem: str) -> str | None:
    """Inverse of `topic_stem`; ValueError for a cut (hashed) or foreign stem."""
    if stem == DEFAULT_TOPIC_STEM:
        return None
    if stem == _EMPTY_TOPIC_STEM:
        return ""
    if is_cut_name(stem):
        raise ValueError(f"topic file name {stem!r} was cut; its topic is in the meta line")
    return decode_component(stem)


def key_from_parts(base_key: str, topic: str | None) -> SessionKey:
    """A key from its base text and topic; unlike `SessionKey.parse`, `#` may be in the base."""
    parts = base_key.split(":", 2)
    if len(parts) == 3 and not is_channel_name(parts[0]) and is_channel_name(parts[1]):
        return SessionKey(parts[1], parts[2], parts[0], topic)
    channel, colon, chat_id = base_key.partition(":")
    if not colon:
        raise ValueError(f"session key {base_key!r} has no ':'")
    return SessionKey(channel, chat_id, None, topic)


def is_live_file_name(name: str) -> bool:
    if not name.endswith(SESSION_SUFFIX):
        return False
    stem = name[: -len(SESSION_SUFFIX)]
    return bool(stem) and "." not in stem


def _checked(name: str) -> str:
    # The encoding already guarantees this; a path outside the root must be impossible, not
    # merely unlikely, so it is checked where the path is built.
    if not name or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise ValueError(f"unsafe file name {name!r}")
    return name


class SessionLayout:
    """Pure path arithmetic under one data directory; never touches the disk."""

    #: Paths remembered (encoding a key costs microseconds, and a turn asks several times).
    PATH_CACHE_SIZE = 4096

    def __init__(self, root: Path) -> None:
        self.root = root
        self.users_dir = root / "users"
        self.legacy_dir = root / "sessions"
        self._paths: dict[SessionKey, Path] = {}

    def user_dir(self, base_key: str) -> Path:
        return self.users_dir / _checked(bounded_name(base_key))

    def sessions_dir(self, key: SessionKey) -> Path:
        return self.user_dir(key.base_key()) / "sessions"

    def path_for(self, key: SessionKey) -> Path:
        path = self._paths.get(key)
        if path is None:
            stem = _checked(topic_stem(key.topic()))
            user = _checked(bounded_name(key.base_key()))
            # One join, not three: each `/` of pathlib parses its arguments again.
            path = self.users_dir / f"{user}/sessions/{stem}{SESSION_SUFFIX}"
            if len(self._paths) >= self.PATH_CACHE_SIZE:
                self._paths.clear()  # cheap to rebuild; a bound, not an LRU
            self._paths[key] = path
        return path

    def name_was_cut(self, key: SessionKey) -> bool:
        topic = key.topic()
        return is_cut_name(bounded_name(key.base_key())) or (
            topic is not None and is_cut_name(topic_stem(topic))
        )

    def legacy_path_for(self, key: SessionKey) -> Path:
        return self.legacy_dir / f"{_checked(bounded_name(str(key)))}{SESSION_SUFFIX}"

    def legacy_name_was_cut(self, key: SessionKey) -> bool:
        return is_cut_name(bounded_name(str(key)))

    def migration_marker(self, key: SessionKey) -> Path:
        return self.sessions_dir(key) / f".migrated.{topic_stem(key.topic())}"


def torn_path(live: Path) -> Path:
    return live.with_name(f"{live.name}.torn")


def corrupt_path(live: Path) -> Path:
    return live.with_name(f"{live.name}.corrupt")


def live_stem(live: Path) -> str:
    return live.name[: -len(SESSION_SUFFIX)]


def archive_path(live: Path, number: int) -> Path:
    return live.with_name(f"{live_stem(live)}.{number}.archive{SESSION_SUFFIX}")


def archive_numbers(live: Path) -> list[int]:
    """Numbers of the compaction archives beside `live`, ascending (blocking: lists the dir)."""
    prefix, suffix = f"{live_stem(live)}.", f".archive{SESSION_SUFFIX}"
    numbers: list[int] = []
    if not live.parent.is_dir():
        return numbers
    for entry in live.parent.iterdir():
        name = entry.name
        if name.startswith(prefix) and name.endswith(suffix):
            middle = name[len(prefix) : -len(suffix)]
            if middle.isdigit():
                numbers.append(int(middle))
    return sorted(numbers)


def archived_path(live: Path, stamp: str) -> Path:
    return live.with_name(f"{live_stem(live)}.{stamp}.archived{SESSION_SUFFIX}")
