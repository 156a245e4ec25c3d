"""Helpers shared by the renderers that turn the agent's Markdown into a platform's markup."""

from __future__ import annotations

from collections.abc import Collection
from functools import cache
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode


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
