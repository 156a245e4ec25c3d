"""The events of a streamed reply of the API channel (Server-Sent Events), read as they come."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp


async def streamed_events(
    response: aiohttp.ClientResponse,
) -> AsyncGenerator[tuple[str, Any], None]:
    """Each event of `response` as (its `event:` name, its `data:` decoded from JSON), in order."""
    kind = ""
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            yield kind, json.loads(line.removeprefix("data:"))
