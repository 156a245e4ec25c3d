"""Email addresses as the channel uses them: bare and lower-case.

The allow list (addresses, `*@domain`) is `channels.access.allow.AllowList`, like every channel's.
"""

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
