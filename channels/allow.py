"""Allow lists: who may talk to a bot."""

from __future__ import annotations

from collections.abc import Callable, Iterable


class AllowList:
    """Sender ids or usernames that may use a channel.

    `"*"` allows everyone; an empty list allows nobody. A sender id may carry several
    identities separated by `|` (Telegram's `"12345|alice"`): any one of them matching is
    enough. Usernames match with or without a leading `@`, case-insensitively. `extra` is
    consulted too: the senders approved by pairing (`channels.allow_overlay`).
    """

    def __init__(
        self, entries: Iterable[str | int], extra: Callable[[str], bool] | None = None
    ) -> None:
        normalised = {self._normalise(str(entry)) for entry in entries}
        self.allows_everyone = "*" in normalised
        self._entries = frozenset(normalised - {"*", ""})
        self._extra = extra

    @staticmethod
    def _normalise(identity: str) -> str:
        return identity.strip().removeprefix("@").casefold()

    @property
    def is_empty(self) -> bool:
        return not self.allows_everyone and not self._entries

    def allows(self, sender_id: str) -> bool:
        if self.allows_everyone:
            return True
        if any(self._normalise(part) in self._entries for part in sender_id.split("|")):
            return True
        return self._extra is not None and self._extra(sender_id)

    @classmethod
    def everyone(cls) -> AllowList:
        return cls(["*"])
