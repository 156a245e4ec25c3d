"""WeCom's server API over aiohttp: `gettoken` and `message/send`, errors in the manager's words.

WeCom answers HTTP 200 with `{"errcode", "errmsg"}` for nearly everything: 0 is success,
40014/42001 an invalid or expired access token (refetched once, then the call is repeated),
45009 and its kin a frequency limit (waited out by the retry layer), 40001/40013/60020 bad
credentials or a server IP not on the app's list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from channels.errors import AuthError, ChannelError, MessageTooLong, RateLimited, TransientError
from channels.web.client import IssuedToken, TokenApi, TokenRefused, issued_token

CHANNEL = "wecom"

#: WeCom says nothing of when to try again; its limits are counted per minute.
RATE_LIMIT_WAIT_S = 3.0


class WeComApi(TokenApi):
    # The platform facts TokenApi asks for: alike in shape to FeishuApi's, different values.
    channel = CHANNEL
    credentials_hint = "check corp_id and secret"

    async def _fetch_token(self) -> IssuedToken:
        params = {"corpid": self.client_id, "corpsecret": self._secret}
        body = await self._request("GET", "/cgi-bin/gettoken", "gettoken", params=params)
        return issued_token(body, "access_token", "expires_in", channel=CHANNEL)

    async def call(self, path: str, what: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST `payload` with the cached access token; a refused token is refetched once."""

        async def post(token: str) -> dict[str, Any]:
            return await self._request(
                "POST", path, what, params={"access_token": token}, json=payload
            )

        return await self.tokens.call_with_token(post, what=what)

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: Mapping[str, str],
        json: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        url = self.base_url + path
        async with (
            self.deadline(what),
            self.http().request(method, url, params=params, json=json) as response,
        ):
            if response.status >= 500:
                raise TransientError(f"{what}: HTTP {response.status}", channel=CHANNEL)
            if response.status == 429:
                raise RateLimited(RATE_LIMIT_WAIT_S, f"{what}: HTTP 429", channel=CHANNEL)
            try:
                body = await response.json(content_type=None)
            except ValueError as exc:
                raise TransientError(f"{what}: the answer is not JSON", channel=CHANNEL) from exc
        if not isinstance(body, dict):
            raise TransientError(f"{what}: the answer is not a JSON object", channel=CHANNEL)
        check(body, what)
        return body


# What the answers' codes mean, as `check` raises them.
INVALID_TOKEN = frozenset({40014, 42001})
#: 45009 "api freq out of limit", 45033 too many concurrent calls, 45047 too many unread
#: messages per member (U), -1 "system busy".
RATE_LIMITED = frozenset({45009, 45033, 45047})
BUSY = frozenset({-1})
CREDENTIALS = {
    40001: "check secret: it is the application's Secret, not the corp's",
    40013: "check corp_id (My Company > Corp ID)",
    40056: "check agent_id",
    60020: "add this server's IP to the application's trusted IPs",
    301002: "check agent_id: the secret belongs to another application",
}
TOO_LONG = frozenset({44004, 45002})


def check(body: Mapping[str, Any], what: str) -> None:
    """Raise the typed error an `errcode` stands for; return for 0."""
    code = body.get("errcode", 0)
    if code == 0:
        return
    detail = f"{what}: errcode {code} ({body.get('errmsg', '')})"
    if code in INVALID_TOKEN:
        raise TokenRefused(detail, channel=CHANNEL)
    if code in RATE_LIMITED:
        raise RateLimited(RATE_LIMIT_WAIT_S, detail, channel=CHANNEL)
    if code in BUSY:
        raise TransientError(detail, channel=CHANNEL, suggestion="WeCom is busy")
    if isinstance(code, int) and code in CREDENTIALS:
        raise AuthError(detail, channel=CHANNEL, suggestion=CREDENTIALS[code])
    if code in TOO_LONG:
        raise MessageTooLong(detail, channel=CHANNEL)
    raise ChannelError(detail, channel=CHANNEL)
