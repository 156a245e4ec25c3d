"""WeCom's published send rates for an application's messages, which the manager's scheduler
keeps every call within.

WeCom server API, "访问频率限制" (https://developer.work.weixin.qq.com/document/path/90454),
发送应用消息频率: "每应用对同一个成员不可超过30次/分钟，1000次/小时，超过部分会被丢弃不下发"
(each application may send one member at most 30 messages a minute; beyond that they are
dropped, not refused), which is why this one must be kept ahead rather than learnt from refusals.
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(chat=Rate(30, 60.0))
