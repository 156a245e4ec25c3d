"""Pairing codes: a stranger's one-time ticket the owner redeems with `octos-gateway pair`.

A channel with `pairing: true` answers a stranger with a short code instead of only their id.
Codes live in `{profile data}/pairing/codes.json` (the daemon writes them, the command line
redeems them, both under the overlay's lock), or with `store: {backend: postgres}` in a table
(`channels.access.postgres_pairing`), by the same rules. A code is valid for an hour and works
once; a sender who asks again while theirs is valid gets the same code; a sender gets at most
`MAX_CODES_PER_DAY` codes in 24 hours. Blocking file I/O: the daemon calls through a thread.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channels.allow_overlay import PAIRING_DIR, locked, read_json, write_json

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
