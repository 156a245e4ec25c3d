"""Where each session lives on disk: the per-user layout, octos' legacy flat layout, side files.

    {root}/users/{enc(base_key)}/sessions/{enc(topic or "default")}.jsonl   live session
    {root}/users/.../sessions/{topic}.jsonl.torn | .corrupt              quarantined lines
    {root}/users/.../sessions/{topic}.{n}.archive.jsonl                  compacted history
    {root}/users/.../sessions/{topic}.{UTC stamp}.archived.jsonl         reset / deleted session
    {root}/users/.../sessions/.migrated.{topic}                          legacy migration done
    {root}/sessions/{enc(key)}[_{FNV-1a hex}].jsonl                      octos' legacy layout

Encoded names contain only `[A-Za-z0-9_%-]`, so a live session's stem never has a dot: every
side file has one, and listings tell them apart by that alone.

Session keys become file names by an encoding that is injective, reversible and never a path of
its own: `encode_component` keeps `[A-Za-z0-9_-]` and writes every other UTF-8 byte as `%XX`
with uppercase hex, so a key can never smuggle a `/`, a `..` or a leading dot into a path, and
two different texts never encode alike. A name that would pass the file-system limit is cut and
gets `_` plus the FNV-1a 64-bit hash of the whole text (octos' rule, so its legacy files still
match).

The daemon's store (written behind its journal) knows which chats have a directory under `users/`
(`ChatDirectories`). It owns its data directory: it lists the chats' directories once, at open, and
notes each one it creates, so loading a chat that never talked (every first message) needs no trip
to the disk, and a new chat's file can be created by the writer thread. New directories are made
without syncing; the store's next `sync` makes their entries durable. Where octos' legacy flat
layout holds files there is no listing (a legacy file migrates on first load), and every load looks
on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from bus import SessionKey, is_channel_name

FNV_OFFSET_BASIS: Final = 0xCBF29CE484222325
FNV_PRIME: Final = 0x100000001B3
_MASK_64: Final = 0xFFFFFFFFFFFFFFFF

#: Longest encoded name kept whole (octos: 200 characters minus the `_` + 16 hex digit suffix).
#: With the suffix and our longest extension (`.{n}.archive.jsonl`) a name stays far below the
#: 255-byte limit of common file systems.
MAX_ENCODED_NAME: Final = 183
HASH_SUFFIX_LEN: Final = 17

_SAFE_BYTES: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ENCODED_BYTE: Final = tuple(
    chr(byte) if byte in _SAFE_BYTES else f"%{byte:02X}" for byte in range(256)
)
_HEX_DIGITS: Final = frozenset("0123456789ABCDEFabcdef")


def fnv1a_64(data: bytes) -> int:
    """FNV-1a, 64 bits: stable across versions and platforms (not a security hash)."""
    value = FNV_OFFSET_BASIS
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & _MASK_64
    return value


def _utf8(text: str) -> bytes:
    # surrogatepass: a lone surrogate (legal in JSON strings) must still encode, not crash.
    return text.encode("utf-8", "surrogatepass")


def encode_component(text: str) -> str:
    """The whole text percent-encoded; never cut."""
    return "".join(_ENCODED_BYTE[byte] for byte in _utf8(text))


def decode_component(name: str) -> str:
    """Inverse of `encode_component`; raises ValueError for a name it could not have made."""
    out = bytearray()
    index = 0
    while index < len(name):
        char = name[index]
        if char == "%":
            digits = name[index + 1 : index + 3]
            if len(digits) != 2 or not set(digits) <= _HEX_DIGITS:
                raise ValueError(f"malformed escape at {index} in {name!r}")
            out.append(int(digits, 16))
            index += 3
            continue
        if len(char.encode()) != 1 or ord(char) not in _SAFE_BYTES:
            raise ValueError(f"{char!r} cannot appear in an encoded name ({name!r})")
        out.append(ord(char))
        index += 1
    return out.decode("utf-8", "surrogatepass")


def bounded_name(text: str, max_len: int = MAX_ENCODED_NAME) -> str:
    """Encoded text, cut and given `_{FNV-1a hex}` once the encoding reaches `max_len`.

    Same rule as octos: bytes are added (whole `%XX` escapes at a time) while the name is
    shorter than `max_len`; if bytes remain after that, the hash of the whole text follows. A
    whole name is at most `max_len + 2` characters and a cut one exactly `HASH_SUFFIX_LEN` longer
    than its prefix (at least `max_len + HASH_SUFFIX_LEN`), so the two can never be confused.
    """
    data = _utf8(text)
    if len(data) * 3 <= max_len:
        # No escape is longer than 3 characters: nothing can be cut (the common, short key).
        return "".join(map(_ENCODED_BYTE.__getitem__, data))
    pieces: list[str] = []
    length = 0
    for byte in data:
        if length >= max_len:
            return "".join(pieces) + f"_{fnv1a_64(data):016X}"
        piece = _ENCODED_BYTE[byte]
        pieces.append(piece)
        length += len(piece)
    return "".join(pieces)


def is_cut_name(name: str, max_len: int = MAX_ENCODED_NAME) -> bool:
    """Whether `bounded_name` cut this name (it then cannot be decoded back)."""
    if len(name) < max_len + HASH_SUFFIX_LEN:
        return False
    suffix = name[-HASH_SUFFIX_LEN:]
    return suffix[0] == "_" and all(c in "0123456789ABCDEF" for c in suffix[1:])


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


def _chat_of(path: Path) -> str:
    """The chat directory's name of a session file: users/{chat}/sessions/{topic}.jsonl."""
    # `parent.parent.name` by index: each `parent` builds a new Path, while `parts` is parsed
    # once per path and kept (every session path has these three last parts).
    return path.parts[-3]


class ChatDirectories:
    def __init__(self, names: set[str]) -> None:
        self._names = names
        #: Chat directories created since the last `take_new`.
        self._new: set[Path] = set()

    @classmethod
    def listed(cls, layout: SessionLayout) -> ChatDirectories | None:
        """The chats on disk now, or None while legacy files may still migrate (blocking: run
        it in a thread, once, at open)."""
        legacy = layout.legacy_dir
        if legacy.is_dir() and any(legacy.iterdir()):
            return None
        users = layout.users_dir
        return cls({entry.name for entry in users.iterdir()} if users.is_dir() else set())

    def has(self, path: Path) -> bool:
        """Whether the chat of session file `path` has a directory."""
        return _chat_of(path) in self._names

    def add(self, path: Path) -> None:
        """The chat of `path` has (or is about to have) its directory."""
        self._names.add(_chat_of(path))

    def add_new(self, path: Path) -> bool:
        """Note the chat of `path` as created now; False if it was on disk already."""
        if self.has(path):
            return False
        self.add(path)
        self._new.add(path.parent.parent)
        return True

    def take_new(self) -> set[Path]:
        """The chat directories created since the last call, for a sync to make durable."""
        new, self._new = self._new, set()
        return new

    def keep_new(self, directories: set[Path]) -> None:
        """A sync that failed: its directories wait for the next one."""
        self._new |= directories
