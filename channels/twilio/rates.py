"""Twilio's send rates: Twilio paces the sending itself, so the scheduler only obeys refusals.

Twilio error 30001 / 21611 (https://www.twilio.com/docs/api/errors/30001): "Twilio queues
messages based on the sending rate of a sender or an account. For example a US long code number
can send one message segment per second"; what exceeds it waits in Twilio's queue (up to 10
hours), it is not refused. A 429 (error 20429, too many concurrent requests) holds the account.
"""

from __future__ import annotations

from channels.pacing import RateLimits

RATE_LIMITS = RateLimits()
