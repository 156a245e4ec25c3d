"""Email: a mailbox read over IMAP (imap-tools, IDLE, by UID) and answered over SMTP (aiosmtplib).

`create(config, context)` is the factory the channel registry calls for `type: email`.
"""

from __future__ import annotations

from channels.email.channel import EmailChannel
from channels.registry import ChannelContext
from config import EmailConfig

__all__ = ["EmailChannel", "create"]


def create(config: EmailConfig, context: ChannelContext) -> EmailChannel:
    return EmailChannel(config, data_dir=context.data_dir)
