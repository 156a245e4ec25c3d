"""A fake Telegram Bot API server on 127.0.0.1, for tests of the real python-telegram-bot.

    async with FakeTelegram() as fake:
        config = TelegramConfig(token=fake.token, base_url=fake.base_url,
                                base_file_url=fake.base_file_url, allow=["*"])
        fake.push_message(chat_id=42, text="hello", username="alice")
        [request] = await fake.wait_for_calls("sendMessage")

It speaks the Bot API's wire format: `/bot<token>/<method>` with JSON, form or multipart
bodies; `{"ok": true, "result": ...}` answers in Telegram's object shapes; errors as non-2xx
with `description` (python-telegram-bot takes any 2xx as success), 429 with
`parameters.retry_after`. getUpdates is a real long poll that honours offsets. Text sent with a
parse mode is parsed by Telegram's rules (`markup`): bad markup is refused with "can't parse
entities", and the 4096 limit applies to the visible text in UTF-16 units. Every request is
recorded; failures, garbage updates and dropped connections can be injected. With
`flood=FloodControl()` it enforces Telegram's flood limits (`flood.py`).

Standalone: `python -m tests.fakes.telegram_server --port 8081` prints its base URL.
"""

from tests.fakes.telegram_server.flood import FloodControl
from tests.fakes.telegram_server.markup import (
    MarkupError,
    parse_html,
    parse_markdown_v2,
    utf16_len,
    visible_text,
)
from tests.fakes.telegram_server.server import DEFAULT_TOKEN, FakeTelegram
from tests.fakes.telegram_server.state import (
    CAPTION_LIMIT,
    TEXT_LIMIT,
    ApiError,
    RecordedRequest,
    UploadedFile,
    detect_entities,
)

__all__ = [
    "CAPTION_LIMIT",
    "DEFAULT_TOKEN",
    "TEXT_LIMIT",
    "ApiError",
    "FakeTelegram",
    "FloodControl",
    "MarkupError",
    "RecordedRequest",
    "UploadedFile",
    "detect_entities",
    "parse_html",
    "parse_markdown_v2",
    "utf16_len",
    "visible_text",
]
