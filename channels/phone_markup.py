"""The agent's Markdown as a phone shows it: WhatsApp's markup, or plain SMS text.

markdown-it-py parses the Markdown; one walk over the tree writes the result. WhatsApp knows
`*bold*`, `_italic_`, `~strike~`, `` `code` ``, ```` ``` ```` blocks and `> ` quotes, and turns
bare URLs into links; SMS knows nothing, so there every marker is dropped and code blocks are
their lines. In both, headings are lines of their own (bold on WhatsApp), lists are bullet or
number text, a link is its text followed by its URL, and tables are aligned text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from markdown_it.tree import SyntaxTreeNode

from channels.markdown_tree import markdown_parser, plain_text, table_text

Dialect = Literal["whatsapp", "sms"]

_MARKERS = {"strong": "*", "em": "_", "s": "~"}
_BULLET = "•"
_RULE = "──────────"


@dataclass(frozen=True, slots=True)
class _Context:
    styles: frozenset[str] = frozenset()
    list_depth: int = 0


class _Renderer:
    def __init__(self, dialect: Dialect) -> None:
        self.marked = dialect == "whatsapp"

    def document(self, root: SyntaxTreeNode) -> str:
        return self._blocks(root.children, _Context(), "\n\n")

    def _blocks(self, nodes: list[SyntaxTreeNode], ctx: _Context, separator: str) -> str:
        rendered = (self._block(node, ctx) for node in nodes)
        return separator.join(part for part in rendered if part)

    def _block(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        kind = node.type
        if kind == "paragraph":
            return self._inline_of(node.children, ctx)
        if kind == "heading":
            return self._wrap("*", self._inline_of(node.children, self._styled_ctx("*", ctx)))
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node, ctx)
        if kind == "blockquote":
            inner = self._blocks(node.children, ctx, "\n\n")
            return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))
        if kind in ("fence", "code_block"):
            return self._preformatted(node.content)
        if kind == "hr":
            return _RULE
        if kind == "table":
            return self._preformatted(table_text(node))
        return node.content.strip()

    def _list(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        ordered = node.type == "ordered_list"
        number = int(str(node.attrs.get("start", 1))) if ordered else 0
        indent = "    " * ctx.list_depth
        inner_ctx = replace(ctx, list_depth=ctx.list_depth + 1)
        items = []
        for item in node.children:
            marker = f"{number}. " if ordered else f"{_BULLET} "
            number += 1
            body = self._blocks(item.children, inner_ctx, "\n")
            if item.children and item.children[0].type.endswith("_list"):
                body = "\n" + body
            items.append(indent + marker + body)
        return "\n".join(items)

    def _inline_of(self, nodes: list[SyntaxTreeNode], ctx: _Context) -> str:
        return "".join(self._inline(child, ctx) for child in nodes)

    def _inline(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        kind = node.type
        if kind == "inline":
            return self._inline_of(node.children, ctx)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            return self._wrap("`", node.content) if self.marked else node.content
        if kind in _MARKERS:
            marker = _MARKERS[kind]
            if marker in ctx.styles:
                return self._inline_of(node.children, ctx)
            return self._wrap(marker, self._inline_of(node.children, self._styled_ctx(marker, ctx)))
        if kind in ("link", "image"):
            href = str(node.attrs.get("href" if kind == "link" else "src", ""))
            label = self._inline_of(node.children, ctx)
            if not href or plain_text(node.children) == href:
                return label or href
            return f"{label} ({href})" if label else href
        return node.content

    def _styled_ctx(self, marker: str, ctx: _Context) -> _Context:
        return replace(ctx, styles=ctx.styles | {marker})

    def _wrap(self, marker: str, inner: str) -> str:
        """`inner` between markers that touch its text (WhatsApp only styles those)."""
        stripped = inner.strip()
        if not self.marked or not stripped:
            return inner
        start = len(inner) - len(inner.lstrip())
        end = start + len(stripped)
        return f"{inner[:start]}{marker}{stripped}{marker}{inner[end:]}"

    def _preformatted(self, code: str) -> str:
        body = code.rstrip("\n")
        if not body.strip():
            return ""
        return f"```\n{body}\n```" if self.marked else body


def render_phone_text(markdown: str, dialect: Dialect) -> str:
    """Markdown as WhatsApp's markup (`"whatsapp"`) or as plain text (`"sms"`)."""
    tree = SyntaxTreeNode(markdown_parser().parse(markdown))
    return _Renderer(dialect).document(tree)
