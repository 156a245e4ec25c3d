"""The fake IMAP server's mailbox: stored messages, UID sets and SEARCH criteria."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SEEN = "\\Seen"


@dataclass
class StoredMail:
    uid: int
    raw: bytes
    flags: set[str] = field(default_factory=set)


def unquote(token: bytes) -> str:
    text = token.decode("utf-8", "replace")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def uid_set(spec: str, highest: int) -> set[int]:
    """`1,3:5,7:*` as a set of numbers; `*` is the highest UID in the mailbox."""
    numbers: set[int] = set()
    for part in spec.split(","):
        low_text, _, high_text = part.partition(":")
        low = highest if low_text == "*" else int(low_text)
        high = low if not high_text else (highest if high_text == "*" else int(high_text))
        low, high = min(low, high), max(low, high)
        numbers.update(range(low, high + 1))
    return numbers


def matching(mails: list[StoredMail], criteria: list[str]) -> list[StoredMail]:
    """The messages a UID SEARCH with these criteria finds (ALL, SEEN, UNSEEN, UID set)."""
    found = list(mails)
    highest = max((mail.uid for mail in mails), default=0)
    words = iter(criteria)
    for word in words:
        key = word.upper()
        if key == "UNSEEN":
            found = [mail for mail in found if SEEN not in mail.flags]
        elif key == "SEEN":
            found = [mail for mail in found if SEEN in mail.flags]
        elif key == "UID":
            wanted = uid_set(next(words), highest)
            found = [mail for mail in found if mail.uid in wanted]
        elif key != "ALL":
            raise ValueError(f"search key {word!r} is not supported by the fake")
    return found


def by_uid(mails: list[StoredMail], spec: str) -> list[tuple[int, StoredMail]]:
    """(sequence number, message) of each message in the UID set `spec`."""
    highest = max((mail.uid for mail in mails), default=0)
    wanted = uid_set(spec, highest)
    return [(n, mail) for n, mail in enumerate(mails, start=1) if mail.uid in wanted]
