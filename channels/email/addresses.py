"""Email addresses as the channel uses them: bare, lower-case, and matched against `allow`."""

from __future__ import annotations

from collections.abc import Iterable
from email.utils import getaddresses, parseaddr


def bare_address(header_value: str) -> str:
    """The address of a From/To header (`"Alice" <Alice@Example.org>` -> alice@example.org).

    Empty when there is none. Lower-cased as a whole: the local part is case-sensitive only
    in theory, and every real mail system treats it as case-insensitive.
    """
    _name, address = parseaddr(header_value)
    address = address.strip()
    return address.casefold() if "@" in address else ""


def display_name(header_value: str) -> str:
    name, _address = parseaddr(header_value)
    return name.strip()


def all_addresses(header_values: Iterable[str]) -> list[str]:
    return [address.casefold() for _name, address in getaddresses(list(header_values)) if address]


class EmailAllowList:
    """Who may write to the bot: exact addresses, `*@domain` for a whole domain, `*` for all.

    A domain pattern matches that domain only, not its subdomains (`*@example.org` lets in
    alice@example.org, not alice@mail.example.org): a subdomain may be run by someone else.
    """

    def __init__(self, entries: Iterable[str | int]) -> None:
        texts = {str(entry).strip().casefold() for entry in entries}
        self.allows_everyone = "*" in texts
        self._domains = frozenset(text[2:] for text in texts if text.startswith("*@"))
        self._addresses = frozenset(text for text in texts if "@" in text and text[0] != "*")

    @property
    def is_empty(self) -> bool:
        return not (self.allows_everyone or self._domains or self._addresses)

    def allows(self, sender: str) -> bool:
        address = sender.strip().casefold()
        if self.allows_everyone:
            return True
        if address in self._addresses:
            return True
        _local, at, domain = address.rpartition("@")
        return bool(at) and domain in self._domains
