"""What a Matrix message is on the wire, and how big.

The manager splits a reply to `MatrixChannel.limit` measured after `format_outbound`, which
here renders the whole `m.room.message` content as it will be sent: `body` (the Markdown) and
`formatted_body` (its HTML), in canonical JSON (UTF-8, no escapes), so the limit is in bytes of
the event as sent, not characters of the text. The spec's limit is 65,536 bytes for the whole
event in federation format; `MAX_CONTENT_BYTES` leaves room for the envelope (ids, timestamps,
hashes, signatures) and for an edit, which carries the new content plus a "* " fallback body,
cut to fit `MAX_EDIT_CONTENT_BYTES`.
"""

from __future__ import annotations

import json
from typing import Any

from bus.text import truncate_utf8
from channels.markup.renderer import render_html as markdown_html

#: The spec's limit for a whole event (canonical JSON, federation format).
MAX_EVENT_BYTES = 65_536
#: What an edit's content may take, leaving 4 KiB for the event around it.
MAX_EDIT_CONTENT_BYTES = MAX_EVENT_BYTES - 4096
#: What a message's own content (body and formatted body) may take; the rest of an edit's
#: room goes to its fallback body.
MAX_CONTENT_BYTES = 48_000

HTML_FORMAT = "org.matrix.custom.html"
Content = dict[str, Any]


def canonical(content: Content) -> str:
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def size_of(content: Content) -> int:
    return len(canonical(content).encode("utf-8"))


def render_html(markdown: str) -> str:
    return markdown_html(markdown).strip()


def message_content(markdown: str) -> Content:
    """A text message: the Markdown as `body`, its HTML as `formatted_body`."""
    html = render_html(markdown)
    content: Content = {"msgtype": "m.text", "body": markdown}
    if html and html != f"<p>{markdown}</p>":
        content["format"] = HTML_FORMAT
        content["formatted_body"] = html
    return content


def encode(markdown: str) -> str:
    """`format_outbound`: the content as sent, so the splitter measures what Matrix receives."""
    return canonical(message_content(markdown))


def decode(text: str) -> Content:
    """Back from `encode`; anything else is plain text (a formatting fallback sends raw text)."""
    if text.startswith('{"body":'):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("msgtype") == "m.text":
            return parsed
    return {"msgtype": "m.text", "body": text}


def edit_content(new: Content, original_event_id: str) -> Content:
    """An `m.replace` edit: `m.new_content` in full, the fallback body cut to fit."""
    edit: Content = {
        "msgtype": "m.text",
        "body": "",
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": original_event_id},
    }
    fallback = "* " + str(new.get("body", ""))
    edit["body"] = fallback
    # JSON escapes make the body grow on the wire: cut it, in proportion, until the edit fits.
    while (total := size_of(edit)) > MAX_EDIT_CONTENT_BYTES and edit["body"] != "*":
        body = str(edit["body"])
        in_json = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
        room = in_json - (total - MAX_EDIT_CONTENT_BYTES)
        raw = len(body.encode("utf-8", "surrogatepass"))
        budget = min(raw - 1, raw * max(0, room) // max(1, in_json))
        edit["body"] = truncate_utf8(fallback, max(0, budget), "…") or "*"
    return edit
