"""Pairing codes: a stranger's one-time ticket the owner redeems with `octos-gateway pair`.

A channel with `pairing: true` answers a stranger with a short code instead of only their id.
Codes live in `{profile data}/pairing/codes.json` (the daemon writes them, the command line
redeems them, both under the overlay's lock), or with `store: {backend: postgres}` in a table
(`channels.access.postgres_pairing`), by the same rules. A code is valid for an hour and works
once; a sender who asks again while theirs is valid gets the same code; a sender gets at most
`MAX_CODES_PER_DAY` codes in 24 hours. Blocking file I/O: the daemon calls through a thread.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from channels.access.allow import (
    PAIRING_DIR,
    AllowOverlay,
    OverlayEntry,
    locked,
    read_json,
    write_json,
)

CODES_FILE = "codes.json"
CODE_TTL_S = 3600.0
MAX_CODES_PER_DAY = 3
DAY_S = 86_400.0
#: No 0/O, 1/I/L: a code read aloud or copied by hand stays unambiguous.
_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
_CODE_LENGTH = 8


def normalise_code(text: str) -> str:
    """What the owner typed, as stored: upper case, without dashes or spaces."""
    return "".join(ch for ch in text.upper() if ch not in "- \t")


def display_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"


def new_code() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(_CODE_LENGTH))


@dataclass(frozen=True, slots=True)
class PendingPair:
    """A redeemed code: who asked, where."""

    channel: str
    sender_id: str
    chat_id: str


class PairingCodes:
    def __init__(self, profile_root: Path, clock: Callable[[], float] = time.time) -> None:
        self.directory = profile_root / PAIRING_DIR
        self.path = self.directory / CODES_FILE
        self._clock = clock

    def issue(self, channel: str, sender_id: str, chat_id: str) -> str | None:
        """The sender's valid code, or a new one; None once they had too many today."""
        now = self._clock()
        with locked(self.directory):
            data = self._current(now)
            codes: dict[str, dict[str, Any]] = data["codes"]
            for code, entry in codes.items():
                if entry["channel"] == channel and entry["sender_id"] == sender_id:
                    return code
            who = f"{channel}:{sender_id}"
            issued: list[float] = data["issued"].setdefault(who, [])
            if len(issued) >= MAX_CODES_PER_DAY:
                return None
            code = new_code()
            codes[code] = {
                "channel": channel,
                "sender_id": sender_id,
                "chat_id": chat_id,
                "expires_at": now + CODE_TTL_S,
            }
            issued.append(now)
            write_json(self.path, data)
        return code

    def redeem(self, typed: str) -> PendingPair | None:
        """Use a code up; None when there is no such valid code."""
        code = normalise_code(typed)
        now = self._clock()
        with locked(self.directory):
            data = self._current(now)
            entry = data["codes"].pop(code, None)
            write_json(self.path, data)
        if entry is None:
            return None
        return PendingPair(entry["channel"], entry["sender_id"], entry["chat_id"])

    def _current(self, now: float) -> dict[str, Any]:
        """The file's content without expired codes and issue times older than a day."""
        data = read_json(self.path)
        codes = {
            code: entry
            for code, entry in dict(data.get("codes", {})).items()
            if isinstance(entry, dict) and float(entry.get("expires_at", 0)) > now
        }
        issued = {
            who: recent
            for who, times in dict(data.get("issued", {})).items()
            if (recent := [t for t in times if isinstance(t, int | float) and now - t < DAY_S])
        }
        return {"codes": codes, "issued": issued}


# Where a profile's pairing is kept: its one-time codes and its approved senders.
#
# `PairingStore` is what the daemon (issuing codes, following the overlay) and the command line
# (`pair`, `allow list|remove`) use. Two backends, chosen where the sessions are
# (`gateway.pairing`):
#
# - `FilePairingStore`: the files in `{profile data}/pairing/` (`channels.access.pairing`,
#   `channels.access.allow`), called through a thread; changes are seen by a look at the
#   overlay file's mtime every second. Processes that pair must share the data directory.
# - `channels.access.postgres_pairing.PostgresPairingStore`: tables in the sessions' database, so
#   every ingress process of a cluster, on any machine, sees a code issued by another and an
#   approval made anywhere (notified at once).
#
# Either is watched with a delay (the second between two looks, a notification on its way), so
# the daemon also reads the approvals at once before it refuses a sender (`look_again`): the
# owner may have approved them a moment ago. Those reads and the watch's go one at a time
# (`OverlayReads`), so a flood of strangers costs one read at a time, not one each.
#: How often the overlay file's mtime is looked at (one stat, off the event loop).
OVERLAY_CHECK_INTERVAL_S: Final = 1.0

#: Called with every approved sender whenever the overlay may have changed.
OnChange = Callable[[list[OverlayEntry]], None]


class OverlayReads:
    """The reads of one profile's approvals, one at a time, each applied before the next
    starts (so what was applied last is what was read last). A caller that asks while a read
    runs shares the next one: one that starts after it asked, as it needs, so a flood of callers
    costs a read at a time. The callers of one store pass the same `on_change` (the daemon's),
    so one whose read was shared misses nothing."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._started = 0

    async def read(
        self, read: Callable[[], Awaitable[list[OverlayEntry] | None]], on_change: OnChange
    ) -> None:
        """Call `on_change` with what `read` returns (None: nothing changed), unless a read
        that started after this call has finished meanwhile."""
        asked_after = self._started
        async with self._lock:
            if self._started > asked_after:
                return  # one started since we asked, and has finished: it saw what we would
            self._started += 1
            entries = await read()
            if entries is not None:
                on_change(entries)


class PairingStore(ABC):
    """One profile's pairing codes and approved senders."""

    @abstractmethod
    async def issue(self, channel: str, sender_id: str, chat_id: str) -> str | None:
        """The sender's valid code, or a new one; None once they had too many today."""

    @abstractmethod
    async def redeem(self, code: str) -> PendingPair | None:
        """Use a code up (as stored: `normalise_code`); None when there is no such valid code."""

    @abstractmethod
    async def entries(self) -> list[OverlayEntry]:
        """Every approved sender, by channel then id."""

    @abstractmethod
    async def add(self, channel: str, sender_id: str) -> bool:
        """Approve a sender; False when they already were."""

    @abstractmethod
    async def remove(self, sender_id: str, channel: str | None = None) -> list[OverlayEntry]:
        """Withdraw a sender's approval (in one channel or all); the entries removed."""

    @abstractmethod
    async def watch(self, on_change: OnChange) -> None:
        """Call `on_change` with the approved senders each time they may have changed (first
        when the watch starts); runs until cancelled."""

    @abstractmethod
    async def look_again(self, on_change: OnChange) -> None:
        """Read the approved senders now, without waiting for the watch, and call `on_change`
        with them if they may have changed; in turn with the watch's reads."""


class FilePairingStore(PairingStore):
    def __init__(self, profile_root: Path) -> None:
        self._codes = PairingCodes(profile_root)
        self._overlay = AllowOverlay(profile_root)
        self._reads = OverlayReads()

    async def issue(self, channel: str, sender_id: str, chat_id: str) -> str | None:
        return await asyncio.to_thread(self._codes.issue, channel, sender_id, chat_id)

    async def redeem(self, code: str) -> PendingPair | None:
        return await asyncio.to_thread(self._codes.redeem, code)

    async def entries(self) -> list[OverlayEntry]:
        return await asyncio.to_thread(self._overlay.entries)

    async def add(self, channel: str, sender_id: str) -> bool:
        return await asyncio.to_thread(self._overlay.add, channel, sender_id)

    async def remove(self, sender_id: str, channel: str | None = None) -> list[OverlayEntry]:
        return await asyncio.to_thread(self._overlay.remove, sender_id, channel)

    async def watch(self, on_change: OnChange) -> None:
        # A file gives no event to wait on across processes: its mtime is looked at.
        while True:
            await self.look_again(on_change)
            await asyncio.sleep(OVERLAY_CHECK_INTERVAL_S)

    async def look_again(self, on_change: OnChange) -> None:
        await self._reads.read(self._entries_if_changed, on_change)

    async def _entries_if_changed(self) -> list[OverlayEntry] | None:
        return await asyncio.to_thread(
            lambda: self._overlay.entries() if self._overlay.changed() else None
        )
