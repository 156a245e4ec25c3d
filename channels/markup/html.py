"""The agent's Markdown as HTML: markdown-it-py's own renderer over the project's parser.

For platforms that take (a subset of) HTML as it is: Matrix's `formatted_body` and the HTML
part of a reply email. Raw HTML in the agent's text is escaped, never passed on.
"""

from __future__ import annotations

from channels.markdown_tree import markdown_parser


def render_html(markdown: str) -> str:
    return str(markdown_parser().render(markdown))
