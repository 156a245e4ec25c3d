"""The agent's Markdown, rendered into Slack's mrkdwn.

markdown-it-py parses the Markdown; one walk over the tree writes mrkdwn. Slack's markup is
small: `*bold*`, `_italic_`, `~strike~`, `` `code` ``, ```` ``` ```` blocks (no language),
`<url|text>` links and `>` quotes. Headings become bold lines, lists become bullet text and
tables a preformatted block. `&`, `<` and `>` are Slack's control characters, so every piece of
text is escaped as `&amp;`, `&lt;`, `&gt;` (code too: Slack decodes the entities there as well);
the only raw `<` and `>` in the output are the links and quote markers the walk writes itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import quote

from markdown_it.tree import SyntaxTreeNode

from channels.markdown_tree import is_linkable, markdown_parser, plain_text, table_text

_MARKERS = {"strong": "*", "em": "_", "s": "~"}
#: Schemes Slack turns into a clickable link; anything else is shown as text.
_LINK_SCHEMES = frozenset({"http", "https", "mailto", "ftp", "slack", "tel"})
_BULLET = "•"
_RULE = "──────────"
#: Characters that would end or split a `<url|text>` link; percent-encoded in the URL.
_URL_SAFE = "".join(chr(code) for code in range(33, 127) if chr(code) not in "<>|")


def escape(text: str) -> str:
    """Text as Slack shows it literally: its three control characters as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True, slots=True)
class _Context:
    styles: frozenset[str] = frozenset()
    in_link: bool = False
    in_quote: bool = False
    list_depth: int = 0


class _Renderer:
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
            return _wrap("*", self._inline_of(node, replace(ctx, styles=ctx.styles | {"*"})))
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node, ctx)
        if kind == "blockquote":
            return self._blockquote(node, ctx)
        if kind in ("fence", "code_block"):
            return _preformatted(node.content)
        if kind == "hr":
            return _RULE
        if kind == "table":
            return _preformatted(table_text(node))
        # html_block cannot occur with html disabled; anything unforeseen is shown as text.
        return escape(node.content.strip())

    def _blockquote(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        inner = self._blocks(node.children, replace(ctx, in_quote=True), "\n\n")
        if not inner or ctx.in_quote:
            # Slack has no nested quotes: an inner quote is part of the outer one.
            return inner
        # Slack reads `>` as a quote only at the start of a line; inside a list item the
        # first line follows the bullet, so there the marker is shown as text instead.
        marker = "&gt; " if ctx.list_depth else "> "
        return "\n".join(marker + line if line else marker.rstrip() for line in inner.split("\n"))

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
            # A nested list starts on its own line, under the item's marker.
            if item.children and item.children[0].type.endswith("_list"):
                body = "\n" + body
            items.append(indent + marker + body)
        return "\n".join(items)

    # Inline

    def _inline_of(self, block: SyntaxTreeNode, ctx: _Context) -> str:
        return "".join(self._inline(child, ctx) for child in block.children)

    def _inline(self, node: SyntaxTreeNode, ctx: _Context) -> str:
        kind = node.type
        if kind == "inline":
            return self._inline_of(node, ctx)
        if kind == "text":
            return escape(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            return escape(node.content) if ctx.in_link else _wrap("`", escape(node.content))
        if kind in _MARKERS:
            return self._styled(_MARKERS[kind], node, ctx)
        if kind == "link":
            return self._link(str(node.attrs.get("href", "")), node.children, ctx)
        if kind == "image":
            return self._link(str(node.attrs.get("src", "")), node.children, ctx)
        return escape(node.content)

    def _styled(self, marker: str, node: SyntaxTreeNode, ctx: _Context) -> str:
        if marker in ctx.styles or ctx.in_link:
            return self._inline_of(node, ctx)
        return _wrap(marker, self._inline_of(node, replace(ctx, styles=ctx.styles | {marker})))

    def _link(self, href: str, children: list[SyntaxTreeNode], ctx: _Context) -> str:
        # A link's label is plain text in Slack: styles and code inside it are dropped.
        label = self._inline_of_nodes(children, replace(ctx, in_link=True))
        if ctx.in_link or not is_linkable(href, _LINK_SCHEMES):
            if not href or plain_text(children) == href:
                return label
            return f"{label} ({escape(href)})" if label else escape(href)
        url = escape(quote(href, safe=_URL_SAFE))
        if not label or plain_text(children) == href:
            return f"<{url}>"
        return f"<{url}|{label}>"

    def _inline_of_nodes(self, nodes: list[SyntaxTreeNode], ctx: _Context) -> str:
        return "".join(self._inline(child, ctx) for child in nodes).replace("\n", " ")


def _wrap(marker: str, inner: str) -> str:
    """`inner` between markers; the markers go around the text, spaces stay outside, as Slack
    only sees a marker that touches the text it styles."""
    stripped = inner.strip()
    if not stripped:
        return inner
    start = len(inner) - len(inner.lstrip())
    end = start + len(stripped)
    return f"{inner[:start]}{marker}{stripped}{marker}{inner[end:]}"


def _preformatted(code: str) -> str:
    body = code.rstrip("\n")
    if not body.strip():
        return ""
    return f"```\n{escape(body)}\n```"


def render_mrkdwn(markdown: str) -> str:
    """Markdown to Slack mrkdwn, ready for `chat.postMessage`'s `text`."""
    tree = SyntaxTreeNode(markdown_parser().parse(markdown))
    return _Renderer().document(tree)
