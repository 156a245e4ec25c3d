"""LINE's published send rate, which the manager's scheduler keeps every call within.

LINE Messaging API reference, "Rate limits" (https://developers.line.biz/en/reference/messaging-api/#rate-limits):
per channel, "Other API endpoints: 2,000 requests per second", which covers the reply and push
endpoints; past it "429 Too Many Requests".
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(account=Rate(2000, 1.0))
