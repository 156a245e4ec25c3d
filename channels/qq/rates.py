"""The QQ bot platform's published send rate, which the manager's scheduler keeps every call
within.

QQ bot open platform, 发送消息 (https://bot.q.qq.com/wiki/develop/api-v2/server-inter/message/send-receive/send.html):
"不论主动消息还是被动消息，在一个子频道中，每 1s 只能发送 5 条消息" (five messages a second in one
channel). The other documented limit, five replies to one user message, is the channel's
`max_reply_messages`.
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(chat=Rate(5, 1.0))
