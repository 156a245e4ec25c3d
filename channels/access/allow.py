"""Allow lists: who may talk to a bot."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sessions.durable import write_state_json

#: An entry of this form (`*@example.org`) allows every address at that domain.
DOMAIN_PATTERN_PREFIX = "*@"


class AllowList:
    """Sender ids or usernames that may use a channel.

    `"*"` allows everyone; an empty list allows nobody. A sender id may carry several
    identities separated by `|` (Telegram's `"12345|alice"`): any one of them matching is
    enough. Usernames match with or without a leading `@`, case-insensitively. An entry
    `*@example.org` allows every address at that domain (email), but not at its subdomains,
    which may be run by someone else. `extra` is consulted too: the senders approved by
    pairing (`channels.access.allow`).
    """

    def __init__(
        self, entries: Iterable[str | int], extra: Callable[[str], bool] | None = None
    ) -> None:
        texts = {str(entry).strip().casefold() for entry in entries}
        patterns = {text for text in texts if text.startswith(DOMAIN_PATTERN_PREFIX)}
        self._domains = frozenset(text.removeprefix(DOMAIN_PATTERN_PREFIX) for text in patterns)
        normalised = {self._normalise(text) for text in texts - patterns}
        self.allows_everyone = "*" in normalised
        self._entries = frozenset(normalised - {"*", ""})
        self._extra = extra

    @staticmethod
    def _normalise(identity: str) -> str:
        return identity.strip().removeprefix("@").casefold()

    @property
    def is_empty(self) -> bool:
        return not self.allows_everyone and not self._entries and not self._domains

    def allows(self, sender_id: str) -> bool:
        if self.allows_everyone:
            return True
        identities = [self._normalise(part) for part in sender_id.split("|")]
        if any(identity in self._entries for identity in identities):
            return True
        if any(self._at_allowed_domain(identity) for identity in identities):
            return True
        return self._extra is not None and self._extra(sender_id)

    def _at_allowed_domain(self, identity: str) -> bool:
        local, at, domain = identity.rpartition("@")
        return bool(local and at) and domain in self._domains

    @classmethod
    def everyone(cls) -> AllowList:
        return cls(["*"])


# The allow-list overlay: senders the owner approved by pairing, kept in the data directory.
#
# One file per profile, `{profile data}/pairing/allowed.json`, written by `octos-gateway pair`
# and `allow remove` and read by the running daemon, which reloads it when its mtime changes (no
# YAML edit, no SIGHUP). Writers take an exclusive `fcntl` lock on `pairing/.lock` and replace the
# file atomically, so the daemon never reads half a file and two writers never lose an entry.
# (With `store: {backend: postgres}` the overlay is a table instead: `channels.access.pairing`.)
#
# `ApprovedSenders` is the daemon's view of the overlay, whichever keeps it. All file methods do
# blocking file I/O: the daemon calls them through `asyncio.to_thread`.
PAIRING_DIR = "pairing"
ALLOWED_FILE = "allowed.json"
LOCK_FILE = ".lock"


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory/.lock`, shared by every process that writes there."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / LOCK_FILE).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` atomically (`sessions.durable`), indented for people to read."""
    write_state_json(path, data, indent=1)


@dataclass(frozen=True, slots=True)
class OverlayEntry:
    channel: str
    sender_id: str
    added_at: str


class ApprovedSenders:
    """The approved senders of one profile, by channel name, in memory: what the channels'
    allow lists consult, replaced whole when the overlay changes."""

    def __init__(self) -> None:
        self._entries: frozenset[tuple[str, str]] = frozenset()
        self._by_channel: dict[str, AllowList] = {}

    def allows(self, channel: str, sender_id: str) -> bool:
        allow = self._by_channel.get(channel)
        return allow is not None and allow.allows(sender_id)

    def view(self, channel: str) -> Callable[[str], bool]:
        """What a channel's `AllowList` consults besides its configured entries."""
        return lambda sender_id: self.allows(channel, sender_id)

    def replace(self, entries: Iterable[OverlayEntry]) -> bool:
        """Approve exactly `entries` from now on; True when that changed who is approved."""
        wanted = frozenset((entry.channel, entry.sender_id) for entry in entries)
        if wanted == self._entries:
            return False
        grouped: dict[str, list[str]] = {}
        for channel, sender_id in sorted(wanted):
            grouped.setdefault(channel, []).append(sender_id)
        self._entries = wanted
        self._by_channel = {channel: AllowList(ids) for channel, ids in grouped.items()}
        return True


class AllowOverlay:
    """The approved senders of one profile, by channel name, in its file."""

    def __init__(self, profile_root: Path) -> None:
        self.directory = profile_root / PAIRING_DIR
        self.path = self.directory / ALLOWED_FILE
        self.approved = ApprovedSenders()
        self._version: tuple[int, int, int] | None = None

    # The daemon's side: an in-memory view, refreshed when the file changes.

    def allows(self, channel: str, sender_id: str) -> bool:
        return self.approved.allows(channel, sender_id)

    def changed(self) -> bool:
        """Whether the file changed since the last look (each write is a new inode)."""
        try:
            stat = self.path.stat()
            version: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            version = None
        if version == self._version:
            return False
        self._version = version
        return True

    def refresh(self) -> bool:
        """Reload when the file changed; True when it did."""
        if not self.changed():
            return False
        self.approved.replace(self.entries())
        return True

    # The command line's side: read and change the file.

    def entries(self) -> list[OverlayEntry]:
        channels = read_json(self.path).get("channels", {})
        return [
            OverlayEntry(channel, str(item["sender_id"]), str(item.get("added_at", "")))
            for channel, items in sorted(channels.items())
            for item in items
            if isinstance(item, dict) and "sender_id" in item
        ]

    def add(self, channel: str, sender_id: str) -> bool:
        """Approve a sender; False when they already were."""
        with locked(self.directory):
            data = read_json(self.path)
            items = data.setdefault("channels", {}).setdefault(channel, [])
            if any(item.get("sender_id") == sender_id for item in items):
                return False
            added_at = datetime.now(UTC).isoformat(timespec="seconds")
            items.append({"sender_id": sender_id, "added_at": added_at})
            write_json(self.path, data)
        return True

    def remove(self, sender_id: str, channel: str | None = None) -> list[OverlayEntry]:
        """Withdraw a sender's approval (in one channel or all); the entries removed."""
        wanted = AllowList([sender_id])
        removed: list[OverlayEntry] = []
        with locked(self.directory):
            data = read_json(self.path)
            channels: dict[str, list[dict[str, Any]]] = data.get("channels", {})
            for name, items in channels.items():
                if channel is not None and name != channel:
                    continue
                keep = [item for item in items if not wanted.allows(str(item.get("sender_id")))]
                removed += [
                    OverlayEntry(name, str(item["sender_id"]), str(item.get("added_at", "")))
                    for item in items
                    if item not in keep
                ]
                channels[name] = keep
            if removed:
                write_json(self.path, data)
        return removed
