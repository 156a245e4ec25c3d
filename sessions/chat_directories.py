"""Which chats have a directory under `users/`, as the daemon's store knows it.

The daemon's store (written behind its journal) owns its data directory: it lists the chats'
directories once, at open, and notes each one it creates, so loading a chat that never talked
(every first message) needs no trip to the disk, and a new chat's file can be created by the
writer thread. New directories are made without syncing; the store's next `sync` makes their
entries durable. Where octos' legacy flat layout holds files there is no listing (a legacy
file migrates on first load), and every load looks on disk.
"""

from __future__ import annotations

from pathlib import Path

from sessions.layout import SessionLayout


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
