"""The agent's Markdown as a phone shows it: WhatsApp's markup, or plain SMS text.

WhatsApp knows `*bold*`, `_italic_`, `~strike~`, `` `code` ``, ```` ``` ```` blocks and `> `
quotes, and turns bare URLs into links; SMS knows nothing, so there every marker is dropped and
code blocks are their lines. In both, headings are lines of their own (bold on WhatsApp), lists
are bullet or number text, a link is its text followed by its URL, quotes nest as `> > `, and
tables are aligned text.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from markdown_it.tree import SyntaxTreeNode

from channels.markup.renderer import Context, Renderer, Style, wrap_touching

PhoneDialect = Literal["whatsapp", "sms"]

_MARKERS = {Style.BOLD: "*", Style.ITALIC: "_", Style.STRIKE: "~"}


class SmsText(Renderer):
    """Plain text: the walk's defaults (no escaping, no markers)."""

    nests_quotes: ClassVar[bool] = True

    def link(self, href: str, children: list[SyntaxTreeNode], ctx: Context) -> str:
        return self.link_as_text(self.inline_children(children, ctx), href, children) or href


class WhatsAppMarkup(SmsText):
    def style(self, style: Style, inner: str) -> str:
        return wrap_touching(_MARKERS[style], inner)

    def code_span(self, plain: str) -> str:
        return wrap_touching("`", plain)

    def pre(self, code: str, info: str, ctx: Context) -> str:
        body = code.rstrip("\n")
        return f"```\n{body}\n```"


_RENDERERS: dict[PhoneDialect, Renderer] = {"whatsapp": WhatsAppMarkup(), "sms": SmsText()}


def render_phone_text(markdown: str, dialect: PhoneDialect) -> str:
    """Markdown as WhatsApp's markup (`"whatsapp"`) or as plain text (`"sms"`)."""
    return _RENDERERS[dialect].render(markdown)
