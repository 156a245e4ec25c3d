"""Telegram's two markup languages, as the Markdown renderer writes them.

Each dialect knows how to escape text and how to wrap already-rendered inner markup in one kind
of entity. The rules are Telegram's (core.telegram.org/bots/api#formatting-options): in HTML
only `&`, `<` and `>` are special; in MarkdownV2 eighteen characters must be escaped outside
code, only `` ` `` and `\\` inside code, only `)` and `\\` inside a link's URL.
"""

from __future__ import annotations

import html
import re
from enum import StrEnum
from typing import Protocol

from telegram.helpers import escape_markdown


class Style(StrEnum):
    BOLD = "bold"
    ITALIC = "italic"
    STRIKE = "strike"


# A code block's language becomes an attribute (HTML) or the rest of the ``` line (MarkdownV2):
# anything outside this set could end either one early.
_LANGUAGE_UNSAFE = re.compile(r"[^\w+#.-]")


def safe_language(info: str) -> str:
    words = info.split()
    return _LANGUAGE_UNSAFE.sub("", words[0])[:32] if words else ""


class Dialect(Protocol):
    def text(self, plain: str) -> str: ...

    def style(self, style: Style, inner: str) -> str: ...

    def code(self, plain: str) -> str: ...

    def pre(self, plain: str, language: str) -> str: ...

    def link(self, inner: str, href: str) -> str: ...

    def quote(self, inner: str) -> str: ...

    def style_separator(self, left: Style, right: Style) -> str:
        """What must stand between two adjacent entities so they are not read as one token."""
        ...


_HTML_TAGS = {Style.BOLD: "b", Style.ITALIC: "i", Style.STRIKE: "s"}


class HtmlDialect:
    """Telegram's HTML: a handful of tags, and `&lt;`, `&gt;`, `&amp;`, `&quot;`."""

    def text(self, plain: str) -> str:
        return html.escape(plain, quote=False)

    def style(self, style: Style, inner: str) -> str:
        tag = _HTML_TAGS[style]
        return f"<{tag}>{inner}</{tag}>"

    def code(self, plain: str) -> str:
        return f"<code>{self.text(plain)}</code>"

    def pre(self, plain: str, language: str) -> str:
        body = self.text(plain.rstrip("\n"))
        if language:
            return f'<pre><code class="language-{language}">{body}</code></pre>'
        return f"<pre>{body}</pre>"

    def link(self, inner: str, href: str) -> str:
        return f'<a href="{html.escape(href, quote=True)}">{inner}</a>'

    def quote(self, inner: str) -> str:
        return f"<blockquote>{inner}</blockquote>"

    def style_separator(self, left: Style, right: Style) -> str:
        return ""


_MARKDOWN_V2_MARKERS = {Style.BOLD: "*", Style.ITALIC: "_", Style.STRIKE: "~"}


class MarkdownV2Dialect:
    """Telegram's MarkdownV2: `*bold*`, `_italic_`, `~strike~`, backslash escapes everywhere."""

    def text(self, plain: str) -> str:
        return escape_markdown(plain, version=2)

    def style(self, style: Style, inner: str) -> str:
        marker = _MARKDOWN_V2_MARKERS[style]
        return f"{marker}{inner}{marker}"

    def code(self, plain: str) -> str:
        return f"`{escape_markdown(plain, version=2, entity_type='code')}`"

    def pre(self, plain: str, language: str) -> str:
        body = escape_markdown(plain.rstrip("\n"), version=2, entity_type="pre")
        return f"```{language}\n{body}\n```"

    def link(self, inner: str, href: str) -> str:
        return f"[{inner}]({escape_markdown(href, version=2, entity_type='text_link')})"

    def quote(self, inner: str) -> str:
        return "\n".join(f">{line}" for line in inner.split("\n"))

    def style_separator(self, left: Style, right: Style) -> str:
        # `_a__b_` would read as an underline entity; Telegram's documented separator between
        # two italics is an empty bold entity.
        return "**" if left is Style.ITALIC and right is Style.ITALIC else ""
