"""Discord's published send rate, on top of the route buckets discord.py already keeps.

discord.py reads every route's `X-RateLimit-*` headers and waits out a bucket before it is
empty, so per-channel limits need nothing more. What it cannot know ahead is the global limit:
Discord's "My Bot is Being Rate Limited"
(https://support-dev.discord.com/hc/en-us/articles/6223003921559-My-Bot-is-Being-Rate-Limited):
"Global Rate Limits - Limit: 50 requests per second across most endpoints - Scope: Applies to
your entire application" (also https://discord.com/developers/docs/topics/rate-limits#global-rate-limit).
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(account=Rate(50, 1.0))
