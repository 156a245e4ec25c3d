"""The agent's Markdown as text with little or no markup: WhatsApp's, plain SMS text, and the
plain-text part of a reply email.

WhatsApp knows `*bold*`, `_italic_`, `~strike~`, `` `code` ``, ```` ``` ```` blocks and `> `
quotes, and turns bare URLs into links; SMS knows nothing, so there every marker is dropped and
code blocks are their lines. In both, headings are lines of their own (bold on WhatsApp), lists
are bullet or number text, a link is its text followed by its URL, quotes nest as `> > `, and
tables are aligned text.

An email's plain part is read by a person in a mail client, so it drops the markup a reader would
see as noise (emphasis markers, link syntax) and keeps what carries meaning: paragraphs, list
bullets (`- `, continuation lines indented under the text), quotes, code blocks with their fences,
tables as aligned text.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from markdown_it.tree import SyntaxTreeNode

from channels.markup.renderer import Context, Renderer, Style, table_text, wrap_touching

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


class EmailText(Renderer):
    rule: ClassVar[str] = "----"
    nests_quotes: ClassVar[bool] = True

    def render(self, markdown: str) -> str:
        return super().render(markdown).strip() + "\n"

    def block(self, node: SyntaxTreeNode, ctx: Context) -> str:
        if node.type == "fence":
            body = node.content.rstrip("\n")
            return f"```{node.info.strip()}\n{body}\n```"
        if node.type == "code_block":
            return "\n".join(f"    {line}" for line in node.content.rstrip("\n").split("\n"))
        return super().block(node, ctx)

    def table(self, node: SyntaxTreeNode, ctx: Context) -> str:
        return table_text(node)

    def list_block(self, node: SyntaxTreeNode, ctx: Context) -> str:
        ordered = node.type == "ordered_list"
        start = int(str(node.attrs.get("start", 1))) if ordered else 1
        items: list[str] = []
        for number, item in enumerate(node.children, start=start):
            marker = f"{number}. " if ordered else "- "
            body = self.blocks(item.children, ctx, "\n")
            items.append(marker + body.replace("\n", "\n" + " " * len(marker)))
        return "\n".join(items)

    def link(self, href: str, children: list[SyntaxTreeNode], ctx: Context) -> str:
        text = self.inline_children(children, ctx)
        return text if not href or href == text else f"{text} <{href}>"

    def image(self, node: SyntaxTreeNode, ctx: Context) -> str:
        return f"[{node.content or 'image'}]"


_RENDERER = EmailText()


def render_email_text(markdown: str) -> str:
    return _RENDERER.render(markdown)
