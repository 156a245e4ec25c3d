"""Each platform's message length limit, in the unit the platform itself counts.

Octos counted UTF-8 bytes for every platform, so a Chinese reply got a third of Telegram's room.
Here each limit carries its unit: UTF-16 code units where the platform counts those (Telegram's
entity offsets, LINE), code points ("chars") where it counts characters, UTF-8 bytes where the
documentation says bytes (WeCom, Matrix events, Feishu request bodies).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Unit = Literal["utf16", "chars", "bytes"]

# Lone surrogates (possible in a str decoded from JSON) must not crash a measurement: they are
# counted as what they would occupy, one UTF-16 unit or three bytes.
_ENCODE_ERRORS = "surrogatepass"


def utf16_units(text: str) -> int:
    # Every code point above the BMP is a surrogate pair: two UTF-16 units.
    return len(text.encode("utf-16-le", _ENCODE_ERRORS)) // 2


@dataclass(frozen=True, slots=True)
class PlatformLimit:
    """How long one message may be, and how the platform measures it."""

    max_units: int
    unit: Unit

    def __post_init__(self) -> None:
        if self.max_units < 1:
            raise ValueError(f"a platform limit must be at least 1 unit, got {self.max_units}")

    def measure(self, text: str) -> int:
        if self.unit == "chars":
            return len(text)
        if self.unit == "utf16":
            return utf16_units(text)
        return len(text.encode("utf-8", _ENCODE_ERRORS))

    def fits(self, text: str) -> bool:
        return self.measure(text) <= self.max_units

    def fit_end(self, text: str, start: int = 0, budget: int | None = None) -> int:
        """End index of the longest `text[start:end]` measuring at most `budget` units.

        `budget` defaults to `max_units`. The end always falls between code points. The work is
        proportional to the budget, not to the text, so a splitter can call it once per chunk.
        """
        units = self.max_units if budget is None else budget
        if units <= 0:
            return start
        # Every code point is at least one unit, so the answer lies within `units` code points.
        stop = min(len(text), start + units)
        if self.unit == "chars":
            return stop
        window = text[start:stop]
        if self.unit == "utf16":
            encoded = window.encode("utf-16-le", _ENCODE_ERRORS)
            if len(encoded) <= 2 * units:
                return stop
            # A pair cut in half leaves a lone high surrogate at the end; "ignore" drops it.
            return start + len(encoded[: 2 * units].decode("utf-16-le", "ignore"))
        encoded = window.encode("utf-8", _ENCODE_ERRORS)
        if len(encoded) <= units:
            return stop
        # A character cut mid-sequence leaves an incomplete tail; "ignore" drops it.
        return start + len(encoded[:units].decode("utf-8", "ignore"))


PLATFORM_LIMITS: Mapping[str, PlatformLimit] = MappingProxyType(
    {
        # Telegram Bot API, sendMessage: "Text of the message to be sent, 1-4096 characters after
        # entities parsing". Telegram counts UTF-16 code units (MessageEntity offsets and lengths
        # are documented in UTF-16 code units), so an emoji outside the BMP costs two.
        "telegram": PlatformLimit(4096, "utf16"),
        # Discord API, Create Message: "content: Message contents (up to 2000 characters)".
        "discord": PlatformLimit(2000, "chars"),
        # Slack API, chat.postMessage: text over 40,000 characters is truncated; Slack's
        # guidance is to keep messages to 4,000 characters (also the RTM limit). We use 4,000.
        "slack": PlatformLimit(4000, "chars"),
        # Twilio Messages resource: "Body ... can be up to 1,600 characters in length" (error
        # 21617: "The concatenated message body exceeds the 1600 character limit").
        "twilio": PlatformLimit(1600, "chars"),
        # WhatsApp Cloud API, text messages: "body ... Maximum 4096 characters".
        "whatsapp": PlatformLimit(4096, "chars"),
        # LINE Messaging API, text message: "Max character limit: 5000"; the page "Character
        # counting in a text" says text is counted in UTF-16 code units (an emoji counts two).
        "line": PlatformLimit(5000, "utf16"),
        # WeCom (企业微信) message/send and the group-robot webhook, text content:
        # "最长不超过2048个字节" (at most 2048 bytes, UTF-8).
        "wecom": PlatformLimit(2048, "bytes"),
        # WeCom AI bot, stream reply (aibot_respond_msg `stream.content`): at most 20,480 bytes,
        # UTF-8 (octos used 4096, the group robot's Markdown limit, which the AI bot's own
        # Markdown messages, aibot_send_msg, keep: see channels/wecom_bot).
        "wecom-bot": PlatformLimit(20_480, "bytes"),
        # Matrix client-server spec, "Size limits": the complete event, in federation format as
        # canonical JSON, must not exceed 65536 bytes. A message carries the text twice (body and
        # formatted_body) plus JSON escaping and the envelope, so we leave each copy under half.
        "matrix": PlatformLimit(32000, "bytes"),
        # Feishu/Lark open platform, im/v1/messages create: "文本消息请求体最大不能超过150KB",
        # "卡片及富文本消息请求体最大不能超过30KB". Streamed replies are edited interactive cards,
        # so the 30 KB card limit applies; 30,000 bytes leaves room for the card JSON around it.
        "feishu": PlatformLimit(30000, "bytes"),
        # Lark is Feishu's international edition: the same open platform and limits.
        "lark": PlatformLimit(30000, "bytes"),
        # QQ bot open platform (v2 API): no message length limit is documented that we could
        # find; 4000 characters is octos' figure, kept as a conservative working limit.
        "qq-bot": PlatformLimit(4000, "chars"),
        # Email has no protocol limit on a body (RFC 5322 only limits line length, which MIME
        # encoding takes care of); 100,000 characters is our own cap to keep a reply readable.
        "email": PlatformLimit(100_000, "chars"),
        # Our own HTTP API and terminal: no platform limit; a cap so a runaway reply stays bounded.
        "api": PlatformLimit(1_000_000, "chars"),
        "cli": PlatformLimit(1_000_000, "chars"),
    }
)
