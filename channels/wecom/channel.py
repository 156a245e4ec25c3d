"""The WeCom application channel: callbacks in through the daemon's HTTP server, replies out
with `message/send`.

`start()` serves the callback route until stopped, from the start, while it fetches an access
token (bad credentials are fatal). Replies go to the user who wrote as text messages (plain text
shows everywhere, the WeChat plug-in included; content the manager marks as formatted goes as
WeCom Markdown), at most 2,048 UTF-8 bytes each: the manager splits to that. No more than 30 go
to one member a minute (`pacing.py`: WeCom drops the rest silently). WeCom cannot edit a sent
message, so streamed replies arrive whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import structlog
from aiohttp import web

from bus import InboundSender, OutboundMessage
from channels.base import FORMATTED
from channels.errors import RateLimited
from channels.lifecycle.run_state import RunStateChannel
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.wecom.api import CHANNEL, WeComApi
from channels.wecom.callback import CallbackReceiver
from channels.wecom.crypto import WeComCrypto
from channels.wecom.messages import WeComMessage
from channels.wecom.pacing import SendWindow
from config import WeComConfig

# WeCom's published send rates for an application's messages, which the manager's scheduler
# keeps every call within.
#
# WeCom server API, "访问频率限制" (https://developer.work.weixin.qq.com/document/path/90454),
# 发送应用消息频率: "每应用对同一个成员不可超过30次/分钟，1000次/小时，超过部分会被丢弃不下发"
# (each application may send one member at most 30 messages a minute; beyond that they are
# dropped, not refused), which is why this one must be kept ahead rather than learnt from refusals.
RATE_LIMITS = RateLimits(chat=Rate(30, 60.0))


log = structlog.get_logger(__name__)


class WeComChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["wecom"]

    def __init__(self, config: WeComConfig, *, window: SendWindow | None = None) -> None:
        self._config = config
        self._window = window or SendWindow()
        self._api = WeComApi(config.api_base_url, config.corp_id, config.secret.get_secret_value())
        crypto = WeComCrypto(
            config.token.get_secret_value(),
            config.encoding_aes_key.get_secret_value(),
            config.corp_id,
        )
        self._receiver = CallbackReceiver(crypto)
        super().__init__()

    async def start(self, inbound: InboundSender) -> None:
        if self._run_state.stopping.is_set():
            return
        async with self._run_state.running():

            async def take(message: WeComMessage) -> None:
                await inbound.send(message.to_inbound())

            # Callbacks are taken while the access token is fetched, as in `RunState.serve`.
            self._receiver.handle = take
            try:
                await self._run_state.receive_while_checking(
                    self._api.tokens.get,
                    "WeCom refused the credentials",
                    channel=CHANNEL,
                    task_name="wecom-receiving",
                )
                log.info(
                    "wecom.receiving",
                    path=self._config.webhook_path,
                    agent_id=self._config.agent_id,
                )
                await self._run_state.receive_until(name="wecom-receiving")
            finally:
                self._receiver.handle = None

    async def stop(self) -> None:
        self._receiver.handle = None
        await super().stop()
        await self._api.close()

    def web_routes(self) -> Sequence[web.AbstractRouteDef]:
        path = self._config.webhook_path
        return (web.get(path, self._receiver.verify_url), web.post(path, self._receiver.receive))

    async def probe(self) -> str | None:
        # Its own client: a probe neither disturbs nor outlives a running channel's session.
        config = self._config
        api = WeComApi(config.api_base_url, config.corp_id, config.secret.get_secret_value())
        try:
            await api.tokens.get()
        finally:
            await api.close()
        return f"corp {config.corp_id}, agent {config.agent_id}"

    async def send(self, message: OutboundMessage) -> None:
        if not message.content.strip():
            return
        wait_s = self._window.reserve(message.chat_id)
        if wait_s > 0:
            raise RateLimited(
                wait_s, "WeCom takes 30 messages a minute per member", channel=CHANNEL
            )
        await self._api.call("/cgi-bin/message/send", "message/send", self._payload(message))

    def _payload(self, message: OutboundMessage) -> dict[str, Any]:
        kind = "markdown" if message.metadata.get(FORMATTED) else "text"
        return {
            "touser": message.chat_id,
            "msgtype": kind,
            "agentid": self._config.agent_id,
            kind: {"content": message.content},
        }

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        await self.send(message)
        return None
