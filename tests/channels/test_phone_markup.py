"""Markdown for phones: WhatsApp's markup and plain SMS text."""

from __future__ import annotations

from channels.markup.plain import render_phone_text
from channels.twilio import TwilioChannel
from channels.whatsapp import WhatsAppChannel

MARKDOWN = """# Title

Some **bold**, _it_, ~~gone~~, `code` and [a link](https://x.example/a).

- one
- two

> quoted

```python
print("hi")
```"""


def test_whatsapp_gets_its_own_markers() -> None:
    assert render_phone_text(MARKDOWN, "whatsapp") == (
        "*Title*\n\n"
        "Some *bold*, _it_, ~gone~, `code` and a link (https://x.example/a).\n\n"
        "• one\n• two\n\n"
        "> quoted\n\n"
        '```\nprint("hi")\n```'
    )


def test_sms_is_plain_text() -> None:
    assert render_phone_text(MARKDOWN, "sms") == (
        "Title\n\n"
        "Some bold, it, gone, code and a link (https://x.example/a).\n\n"
        "• one\n• two\n\n"
        "> quoted\n\n"
        'print("hi")'
    )


def test_plain_text_and_bare_links_pass_unchanged() -> None:
    text = "Your id is +15550009999: ask at https://example.com/help?x=1 please."
    assert render_phone_text(text, "sms") == text
    assert render_phone_text(text, "whatsapp") == text
    assert render_phone_text("[https://a.example](https://a.example)", "sms") == "https://a.example"


def test_the_channels_render_with_their_dialect() -> None:
    # Neither class inherits the other's renderer; mypy, seeing two unrelated method types,
    # takes them for never identical, which is what the test checks.
    assert TwilioChannel.format_outbound is not WhatsAppChannel.format_outbound  # type: ignore[comparison-overlap]
    assert render_phone_text("**x**", "sms") == "x"
    assert render_phone_text("**x**", "whatsapp") == "*x*"
