"""Email: a mailbox read over IMAP (imap-tools, IDLE, by UID) and answered over SMTP (aiosmtplib).

`create(config, context)` is the factory the channel registry calls for `type: email`.
"""

from __future__ import annotations

from channels.email.channel import EmailChannel
from channels.registry import channel_factory

__all__ = ["EmailChannel", "create"]


create = channel_factory(EmailChannel)
