"""Twilio SMS and MMS (`type: twilio`): a signed webhook in, the twilio library's async client out.

`create(config, context)` is the factory the channel registry calls; the registry imports this
package (and with it the twilio library) only for profiles that use Twilio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.twilio.channel import DEFAULT_API_BASE_URL, TwilioChannel
from channels.twilio.inbound import CARRIER_KEYWORDS, parse_sms
from channels.twilio.signature import SIGNATURE_HEADER, TwilioSignature
from channels.webhook_refusal import Verdict

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import TwilioConfig

__all__ = [
    "CARRIER_KEYWORDS",
    "DEFAULT_API_BASE_URL",
    "SIGNATURE_HEADER",
    "TwilioChannel",
    "TwilioSignature",
    "Verdict",
    "create",
    "parse_sms",
]


# Every platform's `create` maps its config to its constructor field by field, typed at both
# ends: they read alike on purpose.
def create(config: TwilioConfig, context: ChannelContext) -> TwilioChannel:
    """Build the Twilio channel of one profile from its validated config."""
    channel = TwilioChannel(
        account_sid=config.account_sid,
        auth_token=config.auth_token.get_secret_value(),
        public_url=config.public_url,
        data_dir=context.data_dir,
        from_number=config.from_number,
        messaging_service_sid=config.messaging_service_sid,
        webhook_path=config.webhook_path,
        api_base_url=config.api_base_url,
        stranger_notice=config.stranger_notice,
    )
    return channel
