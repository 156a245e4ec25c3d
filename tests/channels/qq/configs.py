"""The QQ bot config the channel tests build, pointed at the fake QQ."""

from __future__ import annotations

from config import QQBotConfig
from tests.fakes.qq_server import FakeQQ

PATH = "/qq/callback"


def qq_config(fake: FakeQQ, **fields: object) -> QQBotConfig:
    return QQBotConfig.model_validate(
        {
            "app_id": fake.app_id,
            "app_secret": fake.app_secret,
            "webhook_path": PATH,
            "api_base_url": fake.api_base_url,
            "token_url": fake.token_url,
            **fields,
        }
    )
