"""WhatsApp Cloud API's published send rates, which the manager's scheduler keeps every call
within.

Meta, "Throughput" (https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput):
"For each registered business phone number, Cloud API supports up to 80 messages per second
(mps) by default" (error 130429 past it) and "If you attempt to send too many messages to the
same WhatsApp user number, you may encounter a pair rate limit error" (131056): one message
every 6 seconds to one user, short bursts tolerated; 10 a minute, at most 10 at once, keeps to it.
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(account=Rate(80, 1.0), chat=Rate(10, 60.0))
