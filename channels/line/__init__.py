"""LINE (`type: line`): a webhook on the daemon's HTTP server and line-bot-sdk v3's async
Messaging API.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use LINE.
"""

from __future__ import annotations

from channels.line.channel import LineChannel
from channels.line.webhook import SIGNATURE_HEADER, signature_of
from channels.registry import channel_factory

__all__ = ["SIGNATURE_HEADER", "LineChannel", "create", "signature_of"]


create = channel_factory(LineChannel)
