"""A reply email: the agent's Markdown as a plain-text and an HTML part, threaded.

The HTML part is markdown-it-py's own renderer over the project's parser (raw HTML in the
agent's text is escaped, never passed on). The plain-text part is a walk over the same tree
that drops the markup a reader would see as noise (emphasis markers, link syntax) and keeps
what carries meaning: paragraphs, list bullets, quotes, code blocks with their fences.
Threading follows RFC 5322: `In-Reply-To` names the message answered, `References` the thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, formataddr, make_msgid

from markdown_it.tree import SyntaxTreeNode

from channels.email.state import ThreadInfo
from channels.markdown_tree import markdown_parser, table_text

#: A subject for a message that answers nothing the channel remembers.
DEFAULT_SUBJECT = "Message from your assistant"
_HTML_PAGE = (
    '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
    '<body style="font-family: sans-serif; line-height: 1.4">{body}</body></html>'
)
#: References kept in a reply; long threads keep the first and the latest (RFC 5322 3.6.4).
MAX_REFERENCES = 20


def render_html(markdown: str) -> str:
    return _HTML_PAGE.format(body=markdown_parser().render(markdown))


def render_text(markdown: str) -> str:
    root = SyntaxTreeNode(markdown_parser().parse(markdown))
    return _blocks(root.children, "\n\n").strip() + "\n"


def _blocks(nodes: list[SyntaxTreeNode], separator: str) -> str:
    return separator.join(part for part in (_block(node) for node in nodes) if part)


def _block(node: SyntaxTreeNode) -> str:
    kind = node.type
    if kind in ("paragraph", "heading"):
        return _inline(node.children[0].children if node.children else [])
    if kind in ("bullet_list", "ordered_list"):
        return _list(node)
    if kind == "blockquote":
        inner = _blocks(node.children, "\n\n")
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))
    if kind == "fence":
        info = node.info.strip()
        return f"```{info}\n{node.content.rstrip(chr(10))}\n```"
    if kind == "code_block":
        return "\n".join(f"    {line}" for line in node.content.rstrip("\n").split("\n"))
    if kind == "hr":
        return "----"
    if kind == "table":
        return table_text(node)
    return node.content.strip()


def _list(node: SyntaxTreeNode) -> str:
    start = int(str(node.attrs.get("start", 1))) if node.type == "ordered_list" else 1
    items: list[str] = []
    for number, item in enumerate(node.children, start=start):
        marker = f"{number}. " if node.type == "ordered_list" else "- "
        body = _blocks(item.children, "\n")
        indent = " " * len(marker)
        items.append(marker + body.replace("\n", "\n" + indent))
    return "\n".join(items)


def _inline(nodes: list[SyntaxTreeNode]) -> str:
    out: list[str] = []
    for node in nodes:
        if node.type in ("text", "code_inline"):
            out.append(node.content)
        elif node.type in ("softbreak", "hardbreak"):
            out.append("\n")
        elif node.type == "link":
            text = _inline(node.children)
            href = str(node.attrs.get("href", ""))
            out.append(text if not href or href == text else f"{text} <{href}>")
        elif node.type == "image":
            out.append(f"[{node.content or 'image'}]")
        else:
            out.append(_inline(node.children))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Envelope:
    sender: str
    recipient: str
    subject_prefix: str


def reply_subject(original: str, prefix: str) -> str:
    if not original:
        return DEFAULT_SUBJECT
    stripped = prefix.strip().casefold()
    if stripped and original.casefold().startswith(stripped):
        return original
    return f"{prefix}{original}"


def message_id_for(delivery_id: str, sender: str) -> str:
    """A Message-ID that is the same for every resend of one reply part (its delivery id),
    so a receiving system that sees it twice can tell it is one message."""
    domain = sender.rpartition("@")[2] or "localhost"
    safe = "".join(ch if ch.isalnum() or ch in ".-_" else "-" for ch in delivery_id)
    return f"<{safe}@{domain}>"


def compose_reply(
    envelope: Envelope,
    markdown: str,
    thread: ThreadInfo | None,
    *,
    delivery_id: str | None,
    now: datetime | None = None,
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = formataddr(("", envelope.sender))
    message["To"] = envelope.recipient
    subject = thread.subject if thread is not None else ""
    message["Subject"] = reply_subject(subject, envelope.subject_prefix)
    message["Date"] = format_datetime(now or datetime.now(UTC))
    domain = envelope.sender.rpartition("@")[2] or None
    message["Message-ID"] = (
        message_id_for(delivery_id, envelope.sender) if delivery_id else make_msgid(domain=domain)
    )
    if thread is not None:
        references = [*thread.references, thread.message_id]
        if len(references) > MAX_REFERENCES:
            references = [references[0], *references[-(MAX_REFERENCES - 1) :]]
        message["In-Reply-To"] = f"<{thread.message_id}>"
        message["References"] = " ".join(f"<{ref}>" for ref in references)
    message["Auto-Submitted"] = "auto-replied"
    message.set_content(render_text(markdown))
    message.add_alternative(render_html(markdown), subtype="html")
    return message
