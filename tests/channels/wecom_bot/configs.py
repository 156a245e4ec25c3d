"""The WeCom AI bot config the channel tests build, pointed at the fake server."""

from __future__ import annotations

from config import WecomBotConfig
from tests.fakes.wecom_bot_server import FakeWecomBot


def wecom_bot_config(fake: FakeWecomBot, *, secret: str | None = None) -> WecomBotConfig:
    return WecomBotConfig.model_validate(
        {"bot_id": fake.bot_id, "secret": secret or fake.secret, "ws_url": fake.ws_url}
    )
