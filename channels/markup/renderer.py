"""The one walk over the agent's Markdown; a dialect subclass says how its platform writes it.

The walk knows the tree (blocks, lists, quotes, inline styles, links) and the rules every chat
platform shares: headings are bold lines, lists are bullet or number text, tables are aligned
text in a preformatted block, an empty style or code block is dropped, nested styles of one
kind are written once. A dialect overrides the hooks where its platform differs:

- `text` escapes plain text (identity by default);
- `style` wraps rendered inner markup in bold, italic or strike (identity by default);
- `code_span` and `pre` write inline code and code blocks;
- `link` writes a link (`link_as_text` is the fallback for one the platform cannot open);
- `quote` writes a block quote; `nests_quotes` False makes an inner quote part of the outer;
- `style_separator` goes between two adjacent styles that would otherwise read as one;
- `bullet`, `rule`, `list_indent`, `own_line_blocks`, `styles_in_links` are plain settings.

Every piece of text goes through `text`, so a dialect's escaping covers all of the input.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache
from typing import ClassVar
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode


# Helpers shared by the renderers that turn the agent's Markdown into a platform's markup.
@cache
def markdown_parser() -> MarkdownIt:
    """CommonMark with strikethrough and tables. Raw HTML in the agent's text is shown, not
    interpreted: no chat platform takes arbitrary HTML."""
    return MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


def is_linkable(href: str, schemes: Collection[str]) -> bool:
    """Whether `href` is a URL the platform will render as a link (no spaces, a known scheme)."""
    if not href or any(ch.isspace() for ch in href):
        return False
    try:
        parts = urlsplit(href)
    except ValueError:
        return False
    return parts.scheme.lower() in schemes and bool(parts.netloc or parts.path)


def plain_text(nodes: list[SyntaxTreeNode]) -> str:
    """The text of inline nodes without any markup."""
    out: list[str] = []
    for node in nodes:
        if node.type in ("text", "code_inline"):
            out.append(node.content)
        elif node.type in ("softbreak", "hardbreak"):
            out.append(" ")
        else:
            out.append(plain_text(node.children))
    return "".join(out)


def table_text(table: SyntaxTreeNode) -> str:
    """A Markdown table as aligned plain text, for platforms without tables."""
    rows = [
        [plain_text(cell.children).strip() for cell in row.children]
        for section in table.children
        for row in section.children
    ]
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(len(rows[0]))]
    lines = [
        " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row) if i < len(widths)).rstrip()
        for row in rows
    ]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


class Style(StrEnum):
    BOLD = "bold"
    ITALIC = "italic"
    STRIKE = "strike"


STYLE_NODES = {"strong": Style.BOLD, "em": Style.ITALIC, "s": Style.STRIKE}


@dataclass(frozen=True, slots=True)
class Context:
    styles: frozenset[Style] = frozenset()
    in_link: bool = False
    in_quote: bool = False
    list_depth: int = 0


class Renderer:
    bullet: ClassVar[str] = "•"
    rule: ClassVar[str] = "──────────"
    list_indent: ClassVar[str] = "    "
    #: Blocks that start on their own line when they open a list item.
    own_line_blocks: ClassVar[frozenset[str]] = frozenset({"bullet_list", "ordered_list"})
    #: False where a link's label is plain text (Slack): styles inside it are dropped.
    styles_in_links: ClassVar[bool] = True
    #: True where quotes nest (`> > `); False merges an inner quote into the outer one.
    nests_quotes: ClassVar[bool] = False

    def render(self, markdown: str) -> str:
        return self.document(SyntaxTreeNode(markdown_parser().parse(markdown)))

    def document(self, root: SyntaxTreeNode) -> str:
        return self.blocks(root.children, Context(), "\n\n")

    # Dialect hooks

    def text(self, plain: str) -> str:
        return plain

    def style(self, style: Style, inner: str) -> str:
        return inner

    def code_span(self, plain: str) -> str:
        return self.text(plain)

    def pre(self, code: str, info: str, ctx: Context) -> str:
        return self.text(code.rstrip("\n"))

    def link(self, href: str, children: list[SyntaxTreeNode], ctx: Context) -> str:
        return self.link_as_text(self.inline_children(children, ctx), href, children)

    def quote(self, inner: str, ctx: Context) -> str:
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))

    def style_separator(self, left: Style, right: Style) -> str:
        return ""

    # Blocks

    def blocks(self, nodes: list[SyntaxTreeNode], ctx: Context, separator: str) -> str:
        rendered = (self.block(node, ctx) for node in nodes)
        return separator.join(part for part in rendered if part)

    def block(self, node: SyntaxTreeNode, ctx: Context) -> str:
        kind = node.type
        if kind == "paragraph":
            return self.inline_children(node.children, ctx)
        if kind == "heading":
            inner = self.inline_children(node.children, with_style(ctx, Style.BOLD))
            return self.style(Style.BOLD, inner)
        if kind in ("bullet_list", "ordered_list"):
            return self.list_block(node, ctx)
        if kind == "blockquote":
            return self.blockquote(node, ctx)
        if kind in ("fence", "code_block"):
            return self.preformatted(node.content, node.info, ctx)
        if kind == "hr":
            return self.text(self.rule)
        if kind == "table":
            return self.table(node, ctx)
        # html_block cannot occur with html disabled; anything unforeseen is shown as text.
        return self.text(node.content.strip())

    def list_block(self, node: SyntaxTreeNode, ctx: Context) -> str:
        ordered = node.type == "ordered_list"
        number = int(str(node.attrs.get("start", 1))) if ordered else 0
        indent = self.list_indent * ctx.list_depth
        inner_ctx = replace(ctx, list_depth=ctx.list_depth + 1)
        items = []
        for item in node.children:
            marker = f"{number}. " if ordered else f"{self.bullet} "
            number += 1
            body = self.blocks(item.children, inner_ctx, "\n")
            # A nested list (or, where it needs a line of its own, a quote) starts on its
            # own line, under the item's marker.
            if item.children and item.children[0].type in self.own_line_blocks:
                body = "\n" + body
            items.append(self.text(indent + marker) + body)
        return "\n".join(items)

    def blockquote(self, node: SyntaxTreeNode, ctx: Context) -> str:
        inner = self.blocks(node.children, replace(ctx, in_quote=True), "\n\n")
        if not self.nests_quotes and (ctx.in_quote or not inner):
            return inner
        return self.quote(inner, ctx)

    def preformatted(self, code: str, info: str, ctx: Context) -> str:
        if not code.strip():
            return ""
        return self.pre(code, info, ctx)

    def table(self, node: SyntaxTreeNode, ctx: Context) -> str:
        return self.preformatted(table_text(node), "", ctx)

    # Inline

    def inline_children(self, nodes: list[SyntaxTreeNode], ctx: Context) -> str:
        parts: list[str] = []
        previous: Style | None = None
        for node in nodes:
            current = STYLE_NODES.get(node.type)
            if current is not None and current not in ctx.styles and previous is not None:
                parts.append(self.style_separator(previous, current))
            rendered = self.inline(node, ctx)
            parts.append(rendered)
            styled = current is not None and current not in ctx.styles and bool(rendered)
            previous = current if styled else None
        return "".join(parts)

    def inline(self, node: SyntaxTreeNode, ctx: Context) -> str:
        kind = node.type
        if kind == "inline":
            return self.inline_children(node.children, ctx)
        if kind == "text":
            return self.text(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            # A link's label holds no code on any platform: there it is plain text.
            return self.text(node.content) if ctx.in_link else self.code_span(node.content)
        if kind in STYLE_NODES:
            return self.styled(STYLE_NODES[kind], node, ctx)
        if kind == "link":
            return self.link(str(node.attrs.get("href", "")), node.children, ctx)
        if kind == "image":
            return self.image(node, ctx)
        return self.text(node.content)

    def styled(self, style: Style, node: SyntaxTreeNode, ctx: Context) -> str:
        if style in ctx.styles or (ctx.in_link and not self.styles_in_links):
            return self.inline_children(node.children, ctx)
        return self.style(style, self.inline_children(node.children, with_style(ctx, style)))

    def image(self, node: SyntaxTreeNode, ctx: Context) -> str:
        return self.link(str(node.attrs.get("src", "")), node.children, ctx)

    def link_as_text(self, label: str, href: str, children: list[SyntaxTreeNode]) -> str:
        """A link the platform cannot show as one: its label, then its URL in brackets."""
        if not href or plain_text(children) == href:
            return label
        return label + self.text(f" ({href})") if label else self.text(href)


def with_style(ctx: Context, style: Style) -> Context:
    return replace(ctx, styles=ctx.styles | {style})


def wrap_touching(marker: str, inner: str) -> str:
    """`inner` between markers that touch its text, spaces outside (Slack, WhatsApp only see
    a marker that touches the text it styles); blank `inner` as it is."""
    stripped = inner.strip()
    if not stripped:
        return inner
    start = len(inner) - len(inner.lstrip())
    end = start + len(stripped)
    return f"{inner[:start]}{marker}{stripped}{marker}{inner[end:]}"


# The agent's Markdown as HTML: markdown-it-py's own renderer over the project's parser.
#
# For platforms that take (a subset of) HTML as it is: Matrix's `formatted_body` and the HTML
# part of a reply email. Raw HTML in the agent's text is escaped, never passed on.
def render_html(markdown: str) -> str:
    return str(markdown_parser().render(markdown))
