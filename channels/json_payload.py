"""Reading the JSON a platform sent (a webhook body, a websocket frame): one function, one error.

`json.loads` raises `RecursionError`, not `ValueError`, for a document nested a few thousand
levels deep: a handler that caught only `ValueError` answered such a body with a 500 and a
traceback. The channels read what a platform sends through `json_payload`, so unreadable input
of any kind is one `UnreadableJson` (a `ValueError`). Where an SDK parses its own input (Bolt
for Slack's HTTP mode, python-telegram-bot's polling), the channel catches its errors there.
"""

from __future__ import annotations

import json
from typing import Any


class UnreadableJson(ValueError):
    """Not JSON, not UTF-8, or nested more deeply than the parser goes."""


def json_payload(data: bytes | str) -> Any:
    """The parsed document; `UnreadableJson` saying why when it cannot be read."""
    try:
        return json.loads(data)
    except RecursionError:
        raise UnreadableJson("nested too deeply to read; send a flatter document") from None
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UnreadableJson(str(error)) from None
