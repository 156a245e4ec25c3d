"""The WhatsApp Cloud API (`type: whatsapp`): a signed webhook in, the Graph API out, over aiohttp.

`create(config, context)` is the factory the channel registry calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.webhook_refusal import Verdict
from channels.whatsapp.channel import DEFAULT_API_BASE_URL, WhatsAppChannel
from channels.whatsapp.errors import graph_error
from channels.whatsapp.inbound import parse_notification
from channels.whatsapp.media import media_kind
from channels.whatsapp.signature import SIGNATURE_HEADER, check, sign

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import WhatsAppConfig

__all__ = [
    "DEFAULT_API_BASE_URL",
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


# Every platform's `create` maps its config to its constructor field by field, typed at both
# ends: they read alike on purpose.
def create(config: WhatsAppConfig, context: ChannelContext) -> WhatsAppChannel:
    """Build the WhatsApp channel of one profile from its validated config."""
    channel = WhatsAppChannel(
        access_token=config.access_token.get_secret_value(),
        phone_number_id=config.phone_number_id,
        app_secret=config.app_secret.get_secret_value(),
        verify_token=config.verify_token.get_secret_value(),
        data_dir=context.data_dir,
        webhook_path=config.webhook_path,
        api_base_url=config.api_base_url,
    )
    return channel
