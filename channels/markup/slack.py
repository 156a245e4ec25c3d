"""Slack's mrkdwn as a dialect of the one Markdown renderer.

Slack's markup is small: `*bold*`, `_italic_`, `~strike~`, `` `code` ``, ```` ``` ```` blocks
(no language), `<url|text>` links and `>` quotes. Headings become bold lines, lists become
bullet text and tables a preformatted block. `&`, `<` and `>` are Slack's control characters, so
every piece of text is escaped as `&amp;`, `&lt;`, `&gt;` (code too: Slack decodes the entities
there as well); the only raw `<` and `>` in the output are the links and quote markers the walk
writes itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar
from urllib.parse import quote

from markdown_it.tree import SyntaxTreeNode

from channels.markup.renderer import (
    Context,
    Renderer,
    Style,
    is_linkable,
    plain_text,
    wrap_touching,
)

_MARKERS = {Style.BOLD: "*", Style.ITALIC: "_", Style.STRIKE: "~"}
#: Schemes Slack turns into a clickable link; anything else is shown as text.
_LINK_SCHEMES = frozenset({"http", "https", "mailto", "ftp", "slack", "tel"})
#: Characters that would end or split a `<url|text>` link; percent-encoded in the URL.
_URL_SAFE = "".join(chr(code) for code in range(33, 127) if chr(code) not in "<>|")


def escape(text: str) -> str:
    """Text as Slack shows it literally: its three control characters as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackMrkdwn(Renderer):
    # A link's label is plain text in Slack: styles and code inside it are dropped.
    styles_in_links: ClassVar[bool] = False

    def text(self, plain: str) -> str:
        return escape(plain)

    def style(self, style: Style, inner: str) -> str:
        return wrap_touching(_MARKERS[style], inner)

    def code_span(self, plain: str) -> str:
        return wrap_touching("`", escape(plain))

    def pre(self, code: str, info: str, ctx: Context) -> str:
        body = escape(code.rstrip("\n"))
        return f"```\n{body}\n```"

    def quote(self, inner: str, ctx: Context) -> str:
        # Slack reads `>` as a quote only at the start of a line; inside a list item the
        # first line follows the bullet, so there the marker is shown as text instead.
        # Slack has no nested quotes: an inner quote is part of the outer one.
        marker = "&gt; " if ctx.list_depth else "> "
        return "\n".join(marker + line if line else marker.rstrip() for line in inner.split("\n"))

    def link(self, href: str, children: list[SyntaxTreeNode], ctx: Context) -> str:
        inner_ctx = replace(ctx, in_link=True)
        label = "".join(self.inline(child, inner_ctx) for child in children).replace("\n", " ")
        if ctx.in_link or not is_linkable(href, _LINK_SCHEMES):
            return self.link_as_text(label, href, children)
        url = escape(quote(href, safe=_URL_SAFE))
        if not label or plain_text(children) == href:
            return f"<{url}>"
        return f"<{url}|{label}>"


_RENDERER = SlackMrkdwn()


def render_mrkdwn(markdown: str) -> str:
    """Markdown to Slack mrkdwn, ready for `chat.postMessage`'s `text`."""
    return _RENDERER.render(markdown)
