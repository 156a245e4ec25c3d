"""What the agent sees of a received email: the new text, from plain text or HTML."""

from __future__ import annotations

import pytest

from channels.email.reading import MAX_TEXT_CHARS, read_mail
from tests.fakes.mail import make_mail

REPLY_WITH_HISTORY = """Thanks, that works!

Second paragraph.

--
Alice
Sent from my phone

On Tue, 1 Dec 2026 at 10:00, Bot <bot@example.org> wrote:
> the earlier answer
> more of it
"""


def test_plain_text_is_preferred_and_history_and_signature_are_cut() -> None:
    raw = make_mail(
        '"Alice Example" <Alice@Example.org>',
        REPLY_WITH_HISTORY,
        html="<p>the HTML version, not this</p>",
        subject="Re: A question",
        message_id="<m2@client.example>",
        in_reply_to="<m1@bot.example>",
    )
    mail = read_mail(raw)
    assert mail.text == "Thanks, that works!\n\nSecond paragraph."
    assert mail.sender == "alice@example.org"
    assert mail.sender_name == "Alice Example"
    assert mail.message_id == "m2@client.example"
    assert mail.references == ("m1@bot.example",)
    assert mail.subject == "Re: A question"
    assert not mail.automatic


def test_a_signature_after_the_rfc_3676_delimiter_is_cut() -> None:
    body = "Thanks!\n-- \nAlice Example\nACME Corp, +1 555 0100\n"
    assert read_mail(make_mail("alice@example.org", body)).text == "Thanks!"


def test_dashes_that_are_not_the_delimiter_line_are_the_sender_s_text() -> None:
    body = "Use a -- b here.\n--\nstill mine\n-- not a delimiter\n---\nmine too"
    assert read_mail(make_mail("alice@example.org", body)).text == body


@pytest.mark.parametrize(
    "html",
    [
        "<p>Thanks!<br>-- <br>Alice Example<br>ACME Corp</p>",
        "<div>Thanks!</div><div>--&nbsp;<br>Alice Example</div>",
        '<p>Thanks!</p><pre class="moz-signature" cols="72">-- \nAlice Example</pre>',
        '<div>Thanks!</div><span class="gmail_signature_prefix">-- </span><br>'
        '<div class="gmail_signature">Alice Example</div>',
    ],
)
def test_a_signature_after_the_delimiter_is_cut_from_html_mail(html: str) -> None:
    assert read_mail(make_mail("alice@example.org", None, html=html)).text == "Thanks!"


def test_dashes_in_html_text_stay() -> None:
    html = "<p>Use a -- b here.</p><p>And c --<br>d.</p>"
    text = "Use a -- b here.\n\nAnd c --\nd."
    assert read_mail(make_mail("alice@example.org", None, html=html)).text == text


def test_html_only_mail_is_turned_into_text() -> None:
    html = (
        "<html><body><p>Hello <b>there</b>,</p><p>see the list:</p>"
        "<ul><li>one</li><li>two</li></ul></body></html>"
    )
    mail = read_mail(make_mail("alice@example.org", None, html=html))
    assert mail.text == "Hello there,\n\nsee the list:\n\none\ntwo"


def test_quoted_history_in_html_mail_is_left_out() -> None:
    html = (
        "<div>Yes, Tuesday works.</div>"
        '<div class="gmail_quote">On Mon, Bot wrote:<blockquote>Does Tuesday work?</blockquote>'
        "</div>"
        '<blockquote type="cite">an Apple Mail quote</blockquote>'
    )
    mail = read_mail(make_mail("alice@example.org", None, html=html))
    assert mail.text == "Yes, Tuesday works."


def test_an_empty_body_falls_back_to_the_subject() -> None:
    mail = read_mail(make_mail("alice@example.org", "", subject="Call me tomorrow"))
    assert mail.text == "Call me tomorrow"


def test_attachments_are_kept_and_the_body_is_not_one() -> None:
    raw = make_mail(
        "alice@example.org",
        "the report is attached",
        attachments=(("report.pdf", "application/pdf", b"%PDF-1.4 fake"),),
    )
    mail = read_mail(raw)
    assert mail.text == "the report is attached"
    [attachment] = mail.attachments
    assert (attachment.filename, attachment.content_type) == ("report.pdf", "application/pdf")
    assert attachment.payload == b"%PDF-1.4 fake"


def test_automatic_mail_is_recognised() -> None:
    for headers in ({"Auto-Submitted": "auto-replied"}, {"Precedence": "bulk"}):
        assert read_mail(make_mail("alice@example.org", "away", headers=headers)).automatic
    assert not read_mail(
        make_mail("a@example.org", "hi", headers={"Auto-Submitted": "no"})
    ).automatic


def test_a_huge_body_is_cut_with_a_note() -> None:
    mail = read_mail(make_mail("alice@example.org", "word " * (MAX_TEXT_CHARS // 2)))
    assert len(mail.text) < MAX_TEXT_CHARS + 100
    assert mail.text.endswith("[... the rest of the email was cut off]")


def test_a_message_without_message_id_or_sender_is_read_without_them() -> None:
    raw = b"Subject: bare\r\n\r\njust text\r\n"
    mail = read_mail(raw)
    assert mail.message_id is None
    assert mail.sender == ""
    assert mail.text == "just text"
