"""Telegram's two markup languages (HTML, MarkdownV2) as dialects of the one Markdown renderer.

Telegram's entity rules shape the output: only bold, italic, strike, code, pre, links and
blockquotes exist, so headings become bold lines, lists become bullet text and tables become a
preformatted block; code and pre contain nothing else, links contain no code, blockquotes are
never nested. Every tag the walk opens it closes, and every piece of text goes through the
dialect's escaping, so any input renders into markup Telegram accepts. The escaping rules are
Telegram's (core.telegram.org/bots/api#formatting-options): in HTML only `&`, `<` and `>` are
special; in MarkdownV2 eighteen characters must be escaped outside code, only `` ` `` and `\\`
inside code, only `)` and `\\` inside a link's URL.

Imports python-telegram-bot (its `escape_markdown`): only the Telegram channel imports this.
"""

from __future__ import annotations

import html
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar, Literal

from markdown_it.tree import SyntaxTreeNode
from telegram.helpers import escape_markdown

from channels.markup.renderer import Context, Renderer, Style, is_linkable

ParseModeName = Literal["html", "markdownv2", "none"]

# Telegram refuses a text link it cannot open ("wrong HTTP URL"); others stay visible as text.
_LINK_SCHEMES = frozenset({"http", "https", "tg", "mailto"})
# A code block's language becomes an attribute (HTML) or the rest of the ``` line (MarkdownV2):
# anything outside this set could end either one early.
_LANGUAGE_UNSAFE = re.compile(r"[^\w+#.-]")


def safe_language(info: str) -> str:
    words = info.split()
    return _LANGUAGE_UNSAFE.sub("", words[0])[:32] if words else ""


class _TelegramMarkup(Renderer, ABC):
    rule: ClassVar[str] = "———"
    list_indent: ClassVar[str] = "  "
    # MarkdownV2 knows a quote only by the `>` that begins a line: in a list item it starts
    # on a line of its own, like a nested list.
    own_line_blocks: ClassVar[frozenset[str]] = frozenset(
        {"bullet_list", "ordered_list", "blockquote"}
    )
    #: False where a ``` block cannot sit inside a quote: quoted code becomes quoted text.
    pre_in_quote: ClassVar[bool] = True

    #: What opens and what closes each style's entity.
    entity_marks: ClassVar[Mapping[Style, tuple[str, str]]]

    def style(self, style: Style, inner: str) -> str:
        if not inner:
            return ""
        opening, closing = self.entity_marks[style]
        return f"{opening}{inner}{closing}"

    def pre(self, code: str, info: str, ctx: Context) -> str:
        if ctx.in_quote and not self.pre_in_quote:
            return self.text(code.rstrip("\n"))
        return self.code_block(code, safe_language(info))

    @abstractmethod
    def code_block(self, plain: str, language: str) -> str: ...

    def link(self, href: str, children: list[SyntaxTreeNode], ctx: Context) -> str:
        linkable = not ctx.in_link and is_linkable(href, _LINK_SCHEMES)
        inner = self.inline_children(children, replace(ctx, in_link=True))
        if not linkable:
            return self.link_as_text(inner, href, children)
        return self.text_link(inner or self.text(href), href)

    @abstractmethod
    def text_link(self, inner: str, href: str) -> str: ...


class TelegramHtml(_TelegramMarkup):
    """Telegram's HTML: a handful of tags, and `&lt;`, `&gt;`, `&amp;`, `&quot;`."""

    entity_marks: ClassVar[Mapping[Style, tuple[str, str]]] = {
        Style.BOLD: ("<b>", "</b>"),
        Style.ITALIC: ("<i>", "</i>"),
        Style.STRIKE: ("<s>", "</s>"),
    }

    def text(self, plain: str) -> str:
        return html.escape(plain, quote=False)

    def code_span(self, plain: str) -> str:
        return f"<code>{self.text(plain)}</code>"

    def code_block(self, plain: str, language: str) -> str:
        body = self.text(plain.rstrip("\n"))
        if language:
            return f'<pre><code class="language-{language}">{body}</code></pre>'
        return f"<pre>{body}</pre>"

    def text_link(self, inner: str, href: str) -> str:
        return f'<a href="{html.escape(href, quote=True)}">{inner}</a>'

    def quote(self, inner: str, ctx: Context) -> str:
        return f"<blockquote>{inner}</blockquote>"


class TelegramMarkdownV2(_TelegramMarkup):
    """Telegram's MarkdownV2: `*bold*`, `_italic_`, `~strike~`, backslash escapes everywhere."""

    entity_marks: ClassVar[Mapping[Style, tuple[str, str]]] = {
        Style.BOLD: ("*", "*"),
        Style.ITALIC: ("_", "_"),
        Style.STRIKE: ("~", "~"),
    }
    pre_in_quote: ClassVar[bool] = False

    def text(self, plain: str) -> str:
        return escape_markdown(plain, version=2)

    def code_span(self, plain: str) -> str:
        return f"`{escape_markdown(plain, version=2, entity_type='code')}`"

    def code_block(self, plain: str, language: str) -> str:
        body = escape_markdown(plain.rstrip("\n"), version=2, entity_type="pre")
        return f"```{language}\n{body}\n```"

    def text_link(self, inner: str, href: str) -> str:
        return f"[{inner}]({escape_markdown(href, version=2, entity_type='text_link')})"

    def quote(self, inner: str, ctx: Context) -> str:
        return "\n".join(f">{line}" for line in inner.split("\n"))

    def style_separator(self, left: Style, right: Style) -> str:
        # `_a__b_` would read as an underline entity; Telegram's documented separator between
        # two italics is an empty bold entity.
        return "**" if left is Style.ITALIC and right is Style.ITALIC else ""


_HTML = TelegramHtml()
_MARKDOWN_V2 = TelegramMarkdownV2()


def render_html(markdown: str) -> str:
    """Markdown to Telegram HTML (`parse_mode="HTML"`)."""
    return _HTML.render(markdown)


def render_markdown_v2(markdown: str) -> str:
    """Markdown to Telegram MarkdownV2 (`parse_mode="MarkdownV2"`)."""
    return _MARKDOWN_V2.render(markdown)


def render(markdown: str, mode: ParseModeName) -> str:
    """The agent's Markdown in the markup of `mode`; `"none"` leaves it as it is."""
    if mode == "html":
        return render_html(markdown)
    if mode == "markdownv2":
        return render_markdown_v2(markdown)
    return markdown
