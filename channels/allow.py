"""Allow lists: who may talk to a bot."""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: An entry of this form (`*@example.org`) allows every address at that domain.
DOMAIN_PATTERN_PREFIX = "*@"


class AllowList:
    """Sender ids or usernames that may use a channel.

    `"*"` allows everyone; an empty list allows nobody. A sender id may carry several
    identities separated by `|` (Telegram's `"12345|alice"`): any one of them matching is
    enough. Usernames match with or without a leading `@`, case-insensitively. An entry
    `*@example.org` allows every address at that domain (email), but not at its subdomains,
    which may be run by someone else. `extra` is consulted too: the senders approved by
    pairing (`channels.allow_overlay`).
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
