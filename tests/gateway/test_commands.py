"""Commands on their own: which session a chat's messages go to."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus import SessionKey
from gateway.turn.commands import Commands
from tests.gateway.profile import profile_services


@pytest.mark.parametrize("active", [None, "research"])
@pytest.mark.parametrize("topic", [None, "research", "other"])
async def test_the_current_key_is_the_chat_with_its_active_topic(
    tmp_path: Path, active: str | None, topic: str | None
) -> None:
    # current_key hands back the key it was given when that already names the active topic:
    # equal to the key `with_topic` builds, on either path.
    async with profile_services(tmp_path) as services:
        chat = SessionKey.for_chat("p", "rec", "c1", topic)
        if active is not None:
            await services.topics.switch(chat.base_key(), active)
        current = await Commands(services).current_key(chat)
    assert current == chat.with_topic(active)
    assert str(current) == str(chat.with_topic(active))
