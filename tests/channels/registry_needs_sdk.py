"""A channel module whose platform SDK is an optional extra (the tests hide it)."""

from __future__ import annotations

from typing import Any

import telegram  # noqa: F401  - the optional SDK this module needs

from channels.base import Channel
from tests.channels.registry_plugins import EchoPluginChannel


def create(config: Any, context: Any) -> Channel:
    return EchoPluginChannel(config, context)
