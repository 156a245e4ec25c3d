"""Slack's published send rates, which the manager's scheduler keeps every call within.

Slack API, "Rate limits" (https://api.slack.com/apis/rate-limits): "chat.postMessage generally
allows posting one message per second per channel, while also maintaining a workspace-wide
limit"; "Posting messages: 1 per second. Short bursts >1 allowed." The workspace-wide figure is
not published: a 429 there holds the whole account (several channels refused together).
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(chat=Rate(1, 1.0))
