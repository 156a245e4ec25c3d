"""Twilio SMS and MMS (`type: twilio`): a signed webhook in, the twilio library's async client out.

`create(config, context)` is the factory the channel registry calls; the registry imports this
package (and with it the twilio library) only for profiles that use Twilio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.twilio.channel import TwilioChannel
from channels.twilio.inbound import CARRIER_KEYWORDS, parse_sms
from channels.twilio.signature import SIGNATURE_HEADER, TwilioSignature
from channels.webhook_refusal import Verdict

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import TwilioConfig

__all__ = [
    "CARRIER_KEYWORDS",
    "SIGNATURE_HEADER",
    "TwilioChannel",
    "TwilioSignature",
    "Verdict",
    "create",
    "parse_sms",
]


def create(config: TwilioConfig, context: ChannelContext) -> TwilioChannel:
    return TwilioChannel(config, data_dir=context.data_dir)
