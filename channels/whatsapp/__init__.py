"""The WhatsApp Cloud API (`type: whatsapp`): a signed webhook in, the Graph API out, over aiohttp.

`create(config, context)` is the factory the channel registry calls.
"""

from __future__ import annotations

from channels.registry import channel_factory
from channels.web.webhook import Verdict
from channels.whatsapp.channel import WhatsAppChannel
from channels.whatsapp.graph import graph_error
from channels.whatsapp.inbound import parse_notification
from channels.whatsapp.media import media_kind
from channels.whatsapp.webhook import SIGNATURE_HEADER, check, sign

__all__ = [
    "SIGNATURE_HEADER",
    "Verdict",
    "WhatsAppChannel",
    "check",
    "create",
    "graph_error",
    "media_kind",
    "parse_notification",
    "sign",
]


create = channel_factory(WhatsAppChannel)
