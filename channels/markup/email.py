"""The plain-text part of a reply email, as a dialect of the one Markdown renderer.

It drops the markup a reader would see as noise (emphasis markers, link syntax) and keeps what
carries meaning: paragraphs, list bullets (`- `, continuation lines indented under the text),
quotes, code blocks with their fences, tables as aligned text.
"""

from __future__ import annotations

from typing import ClassVar

from markdown_it.tree import SyntaxTreeNode

from channels.markup.renderer import Context, Renderer, table_text


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
