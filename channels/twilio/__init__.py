"""Twilio SMS and MMS (`type: twilio`): a signed webhook in, the twilio library's async client out.

`create(config, context)` is the factory the channel registry calls; the registry imports this
package (and with it the twilio library) only for profiles that use Twilio.
"""

from __future__ import annotations

from channels.registry import channel_factory
from channels.twilio.channel import TwilioChannel
from channels.twilio.webhook import CARRIER_KEYWORDS, SIGNATURE_HEADER, TwilioSignature, parse_sms
from channels.web.webhook import Verdict

__all__ = [
    "CARRIER_KEYWORDS",
    "SIGNATURE_HEADER",
    "TwilioChannel",
    "TwilioSignature",
    "Verdict",
    "create",
    "parse_sms",
]


create = channel_factory(TwilioChannel)
