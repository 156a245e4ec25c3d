"""A reply's MIME structure: plain text and HTML from the agent's Markdown, threaded."""

from __future__ import annotations

from datetime import UTC, datetime
from email import policy
from email.parser import BytesParser

import pytest

from channels.email.composing import (
    DEFAULT_SUBJECT,
    Envelope,
    compose_reply,
    render_html,
    render_text,
    reply_subject,
)
from channels.email.state import ThreadInfo

MARKDOWN = """# Plan

**Bold** and _soft_ words with a [link](https://example.org/x) and `code`.

- first
- second

1. one
2. two

> quoted

```python
print("<hello>")
```
"""
ENVELOPE = Envelope("bot@example.org", "alice@example.org", "Re: ")
THREAD = ThreadInfo("alice@example.org", "m2@client.example", "A question", ("m1@bot.example",))


def test_plain_text_drops_markup_and_keeps_structure_and_code() -> None:
    assert render_text(MARKDOWN) == (
        "Plan\n\n"
        "Bold and soft words with a link <https://example.org/x> and code.\n\n"
        "- first\n- second\n\n"
        "1. one\n2. two\n\n"
        "> quoted\n\n"
        '```python\nprint("<hello>")\n```\n'
    )


def test_html_is_markdown_it_output_with_raw_html_escaped() -> None:
    html = render_html(MARKDOWN + "\n<script>alert(1)</script>\n")
    assert "<h1>Plan</h1>" in html
    assert "<strong>Bold</strong>" in html
    assert '<a href="https://example.org/x">link</a>' in html
    assert '<code class="language-python">print(&quot;&lt;hello&gt;&quot;)' in html
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_the_reply_is_threaded_under_the_message_it_answers() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    reply = compose_reply(ENVELOPE, MARKDOWN, THREAD, delivery_id="0193abc.2", now=now)
    parsed = BytesParser(policy=policy.default).parsebytes(reply.as_bytes())
    assert parsed["Subject"] == "Re: A question"
    assert parsed["In-Reply-To"] == "<m2@client.example>"
    assert parsed["References"] == "<m1@bot.example> <m2@client.example>"
    assert parsed["From"] == "bot@example.org"
    assert parsed["To"] == "alice@example.org"
    assert parsed["Message-ID"] == "<0193abc.2@example.org>"
    assert parsed["Auto-Submitted"] == "auto-replied"
    assert parsed.get_content_type() == "multipart/alternative"
    plain = parsed.get_body(preferencelist=("plain",))
    html = parsed.get_body(preferencelist=("html",))
    assert plain is not None
    assert html is not None
    assert "Bold and soft" in plain.get_content()
    assert "<strong>Bold</strong>" in html.get_content()


def test_a_resend_of_the_same_part_has_the_same_message_id() -> None:
    first = compose_reply(ENVELOPE, "hi", THREAD, delivery_id="turn-1.1")
    again = compose_reply(ENVELOPE, "hi", THREAD, delivery_id="turn-1.1")
    other = compose_reply(ENVELOPE, "hi", THREAD, delivery_id="turn-1.2")
    assert first["Message-ID"] == again["Message-ID"] != other["Message-ID"]


@pytest.mark.parametrize(
    ("original", "expected"),
    [
        ("A question", "Re: A question"),
        ("Re: A question", "Re: A question"),
        ("Re: Re: A question", "Re: A question"),
        ("RE: A question", "Re: A question"),
        ("re:A question", "Re: A question"),
        ("Re[2]: A question", "Re: A question"),
        ("Re(3): A question", "Re: A question"),
        ("RE : A question", "Re: A question"),
        ("Aw: A question", "Re: A question"),
        ("AW:A question", "Re: A question"),
        ("Sv: A question", "Re: A question"),
        ("Antw: A question", "Re: A question"),
        ("回复: A question", "Re: A question"),
        ("答复：A question", "Re: A question"),
        ("Re: AW: RE: A question", "Re: A question"),
        ("Fwd: A question", "Re: Fwd: A question"),
        ("Re: Fwd: A question", "Re: Fwd: A question"),
        ("Reminder: A question", "Re: Reminder: A question"),
    ],
)
def test_a_reply_subject_has_one_prefix_whatever_markers_the_original_has(
    original: str, expected: str
) -> None:
    assert reply_subject(original, "Re: ") == expected


def test_a_prefix_of_the_operator_s_own_is_not_doubled_either() -> None:
    assert reply_subject("Frage", "AW: ") == "AW: Frage"
    assert reply_subject("Re: Frage", "AW: ") == "AW: Frage"
    assert reply_subject("[bot] status", "[bot] ") == "[bot] status"


def test_a_new_message_gets_a_subject() -> None:
    assert reply_subject("", "Re: ") == DEFAULT_SUBJECT
    unthreaded = compose_reply(ENVELOPE, "hello", None, delivery_id=None)
    assert unthreaded["Subject"] == DEFAULT_SUBJECT
    assert unthreaded["In-Reply-To"] is None
    assert str(unthreaded["Message-ID"]).endswith("@example.org>")


def test_a_long_thread_keeps_the_first_and_the_latest_references() -> None:
    refs = tuple(f"r{n}@x" for n in range(30))
    reply = compose_reply(ENVELOPE, "hi", ThreadInfo("a@x", "m@x", "s", refs), delivery_id="d")
    kept = str(reply["References"]).split()
    assert len(kept) == 20
    assert kept[0] == "<r0@x>"
    assert kept[-1] == "<m@x>"
