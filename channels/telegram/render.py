"""The agent's Markdown, rendered into the markup Telegram parses (HTML or MarkdownV2).

markdown-it-py parses the Markdown into a syntax tree; one walk renders it through a dialect.
Telegram's entity rules shape the output: only bold, italic, strike, code, pre, links and
blockquotes exist, so headings become bold lines, lists become bullet text and tables become a
preformatted block; code and pre contain nothing else, links contain no code, blockquotes are
never nested. Every tag the walk opens it closes, and every piece of text goes through the
dialect's escaping, so any input renders into markup Telegram accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from markdown_it.tree import SyntaxTreeNode

from channels.markdown_tree import is_linkable, markdown_parser, plain_text, table_text
from channels.telegram.dialects import (
    Dialect,
    HtmlDialect,
    MarkdownV2Dialect,
    Style,
    safe_language,
)

ParseModeName = Literal["html", "markdownv2", "none"]

_STYLE_NODES = {"strong": Style.BOLD, "em": Style.ITALIC, "s": Style.STRIKE}
# Telegram refuses a text link it cannot open ("wrong HTTP URL"); others stay visible as text.
_LINK_SCHEMES = frozenset({"http", "https", "tg", "mailto"})
_BULLET = "•"
_OWN_LINE_BLOCKS = frozenset({"bullet_list", "ordered_list", "blockquote"})
_RULE = "———"


@dataclass(frozen=True, slots=True)
class _Context:
    styles: frozenset[Style] = frozenset()
    in_link: bool = False
    in_quote: bool = False
    list_depth: int = 0


class _Renderer:
    def __init__(self, dialect: Dialect, *, pre_in_quote: bool) -> None:
        self._dialect = dialect
        self._pre_in_quote = pre_in_quote

    def document(self, root: SyntaxTreeNode) -> str:
        return self._blocks(root.children, _Context(), "\n\n")

    # Blocks

    def _blocks(self, nodes: list[SyntaxTreeNode], ctx: _Context, separator: str) -> str:
        rendered = (self._block(node, ctx) for node in nodes)
        return separator.join(part for part in rendered if part)

    def _block(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        kind = node.type
        if kind == "paragraph":
            return self._inline_of(node, ctx)
        if kind == "heading":
            inner = self._inline_of(node, replace(ctx, styles=ctx.styles | {Style.BOLD}))
            return self._dialect.style(Style.BOLD, inner) if inner else ""
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node, ctx)
        if kind == "blockquote":
            return self._blockquote(node, ctx)
        if kind in ("fence", "code_block"):
            return self._preformatted(node.content, safe_language(node.info), ctx)
        if kind == "hr":
            return self._dialect.text(_RULE)
        if kind == "table":
            return self._preformatted(table_text(node), "", ctx)
        # html_block cannot occur with html disabled; anything unforeseen is shown as text.
        return self._dialect.text(node.content.strip())

    def _list(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        ordered = node.type == "ordered_list"
        number = int(str(node.attrs.get("start", 1))) if ordered else 0
        indent = "  " * ctx.list_depth
        inner_ctx = replace(ctx, list_depth=ctx.list_depth + 1)
        items = []
        for item in node.children:
            marker = f"{number}. " if ordered else f"{_BULLET} "
            number += 1
            body = self._blocks(item.children, inner_ctx, "\n")
            # A nested list or a quote starts on its own line, under the item's marker
            # (MarkdownV2 knows a quote only by the `>` that begins a line).
            if item.children and item.children[0].type in _OWN_LINE_BLOCKS:
                body = "\n" + body
            items.append(self._dialect.text(indent + marker) + body)
        return "\n".join(items)

    def _blockquote(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        inner = self._blocks(node.children, replace(ctx, in_quote=True), "\n\n")
        if ctx.in_quote or not inner:
            return inner
        return self._dialect.quote(inner)

    def _preformatted(self, code: str, language: str, ctx: _Context) -> str:
        if not code.strip():
            return ""
        if ctx.in_quote and not self._pre_in_quote:
            return self._dialect.text(code.rstrip("\n"))
        return self._dialect.pre(code, language)

    # Inline

    def _inline_of(self, block: SyntaxTreeNode, ctx: _Context) -> str:
        return "".join(self._inline(child, ctx) for child in block.children)

    def _inline(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        kind = node.type
        if kind == "inline":
            return self._inline_children(node.children, ctx)
        if kind == "text":
            return self._dialect.text(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            if ctx.in_link:
                return self._dialect.text(node.content)
            return self._dialect.code(node.content)
        if kind in _STYLE_NODES:
            return self._styled(_STYLE_NODES[kind], node, ctx)
        if kind == "link":
            return self._link(str(node.attrs.get("href", "")), node.children, ctx)
        if kind == "image":
            return self._link(str(node.attrs.get("src", "")), node.children, ctx)
        return self._dialect.text(node.content)

    def _inline_children(self, nodes: list[SyntaxTreeNode], ctx: _Context) -> str:
        parts: list[str] = []
        previous: Style | None = None
        for node in nodes:
            current = _STYLE_NODES.get(node.type)
            if current is not None and current not in ctx.styles and previous is not None:
                parts.append(self._dialect.style_separator(previous, current))
            rendered = self._inline(node, ctx)
            parts.append(rendered)
            styled = current is not None and current not in ctx.styles and bool(rendered)
            previous = current if styled else None
        return "".join(parts)

    def _styled(self, style: Style, node: SyntaxTreeNode, ctx: _Context) -> str:
        if style in ctx.styles:
            return self._inline_children(node.children, ctx)
        inner = self._inline_children(node.children, replace(ctx, styles=ctx.styles | {style}))
        return self._dialect.style(style, inner) if inner else ""

    def _link(self, href: str, children: list[SyntaxTreeNode], ctx: _Context) -> str:
        linkable = not ctx.in_link and is_linkable(href, _LINK_SCHEMES)
        inner = self._inline_children(children, replace(ctx, in_link=True))
        if not linkable:
            if not href or plain_text(children) == href:
                return inner
            return inner + self._dialect.text(f" ({href})") if inner else self._dialect.text(href)
        return self._dialect.link(inner or self._dialect.text(href), href)


def render_html(markdown: str) -> str:
    """Markdown to Telegram HTML (`parse_mode="HTML"`)."""
    tree = SyntaxTreeNode(markdown_parser().parse(markdown))
    return _Renderer(HtmlDialect(), pre_in_quote=True).document(tree)


def render_markdown_v2(markdown: str) -> str:
    """Markdown to Telegram MarkdownV2 (`parse_mode="MarkdownV2"`)."""
    tree = SyntaxTreeNode(markdown_parser().parse(markdown))
    # A ``` block cannot sit inside `>`-prefixed quote lines: quoted code becomes quoted text.
    return _Renderer(MarkdownV2Dialect(), pre_in_quote=False).document(tree)


def render(markdown: str, mode: ParseModeName) -> str:
    """The agent's Markdown in the markup of `mode`; `"none"` leaves it as it is."""
    if mode == "html":
        return render_html(markdown)
    if mode == "markdownv2":
        return render_markdown_v2(markdown)
    return markdown
