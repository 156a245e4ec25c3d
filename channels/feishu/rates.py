"""Feishu's (and Lark's) published send rates, which the manager's scheduler keeps every call
within.

Feishu open platform, im/v1/messages create ("发送消息",
https://open.feishu.cn/document/server-docs/im-v1/message/create): "向同一用户发送消息的限频为
5 QPS、向同一群组发送消息的限频为群内机器人共享 5 QPS" (5 a second to one user, 5 a second to one
group, shared by its bots), and the API's own level "1000 次/分钟、50 次/秒"
(https://open.feishu.cn/document/server-docs/api-call-guide/frequency-control): 16 a second
keeps under both 1,000 a minute and 50 in any second.
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(account=Rate(16, 1.0), chat=Rate(5, 1.0))
