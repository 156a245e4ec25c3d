"""Telegram's two markup languages as the Bot API parses them, for the fake server and tests.

`parse_html` and `parse_markdown_v2` return the visible text and its entities (offsets and
lengths in UTF-16 code units), or raise `MarkupError` where Telegram answers "can't parse
entities". The nesting rules are Telegram's: styles (bold, italic, underline, strike, spoiler)
nest freely; code and pre contain nothing (but `<pre><code class="language-x">`); blockquotes
are not nested; links contain no code, pre or other links. Like Telegram, the HTML parser keeps
a bare `&` or `>` as text but refuses a `<` that does not start a supported tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class MarkupError(ValueError):
    """What Telegram answers as "Bad Request: can't parse entities: ..."."""


_HTML_TAG = re.compile(
    r"<(/?)([A-Za-z][A-Za-z0-9-]*)"
    r"((?:\s+[A-Za-z][\w-]*(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'>]+))?)*)\s*>"
)
_HTML_ATTR = re.compile(r"([A-Za-z][\w-]*)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'>]+)))?")
_HTML_ENTITY = re.compile(r"&(#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|lt|gt|amp|quot);")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_HTML_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}
_STYLES = frozenset({"bold", "italic", "underline", "strikethrough", "spoiler"})


@dataclass
class _Open:
    tag: str
    kind: str
    start: int
    attrs: dict[str, str]


class _EntityBuilder:
    """Visible text and entities, with Telegram's nesting rules checked as entities open."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.units = 0
        self.stack: list[_Open] = []
        self.entities: list[dict[str, Any]] = []

    def add_text(self, text: str) -> None:
        self.text.append(text)
        self.units += utf16_len(text)

    def open(self, tag: str, kind: str, attrs: dict[str, str]) -> None:
        inside = {entry.kind for entry in self.stack}
        if kind == "code" and self.stack and self.stack[-1].kind == "pre":
            pass  # <pre><code class="language-x">: the language of the block
        elif inside & {"code", "pre"}:
            raise MarkupError(f'entity "{tag}" can\'t be inside a code or pre entity')
        elif kind == "blockquote" and "blockquote" in inside:
            raise MarkupError("blockquote entities can't be nested")
        elif kind not in _STYLES | {"blockquote"} and inside - _STYLES - {"blockquote"}:
            raise MarkupError(f'entity "{tag}" can\'t be inside {sorted(inside - _STYLES)}')
        if kind == "text_link" and not attrs.get("href"):
            raise MarkupError('a link needs an "href"')
        self.stack.append(_Open(tag, kind, self.units, attrs))

    def close(self, tag: str) -> None:
        if not self.stack or self.stack[-1].tag != tag:
            expected = f"</{self.stack[-1].tag}>" if self.stack else "nothing"
            raise MarkupError(f'unmatched end tag "</{tag}>", expected {expected}')
        entry = self.stack.pop()
        if entry.kind == "code" and self.stack and self.stack[-1].kind == "pre":
            language = entry.attrs.get("class", "").removeprefix("language-")
            self.stack[-1].attrs["language"] = language
            return
        entity: dict[str, Any] = {
            "type": entry.kind,
            "offset": entry.start,
            "length": self.units - entry.start,
        }
        if entry.kind == "text_link":
            entity["url"] = entry.attrs["href"]
        if entry.kind == "pre" and entry.attrs.get("language"):
            entity["language"] = entry.attrs["language"]
        if entity["length"] > 0:
            self.entities.append(entity)

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        if self.stack:
            raise MarkupError(
                f'can\'t find end tag corresponding to start tag "{self.stack[-1].tag}"'
            )
        return "".join(self.text), sorted(self.entities, key=lambda e: (e["offset"], -e["length"]))


def parse_html(markup: str) -> tuple[str, list[dict[str, Any]]]:
    """Telegram's HTML: the visible text and its entities, or MarkupError."""
    builder = _EntityBuilder()
    position = 0
    for special in re.finditer(r"[<&]", markup):
        if special.start() < position:
            continue
        builder.add_text(markup[position : special.start()])
        if special.group() == "&":
            entity = _HTML_ENTITY.match(markup, special.start())
            if entity is None:  # Telegram keeps a bare "&" as text
                builder.add_text("&")
                position = special.start() + 1
                continue
            name = entity.group(1)
            if name.startswith("#"):
                number = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
                builder.add_text(chr(number) if 0 < number < 0x110000 else "\ufffd")
            else:
                builder.add_text(_NAMED[name])
            position = entity.end()
            continue
        tag = _HTML_TAG.match(markup, special.start())
        if tag is None:
            raise MarkupError(f"unsupported start tag at byte offset {special.start()}")
        closing, name, raw_attrs = tag.group(1) == "/", tag.group(2).lower(), tag.group(3)
        if name not in _HTML_TAGS:
            raise MarkupError(f'unsupported start tag "{name}"')
        if closing:
            builder.close(name)
        else:
            attrs = {
                m.group(1).lower(): next((g for g in m.groups()[1:] if g is not None), "")
                for m in _HTML_ATTR.finditer(raw_attrs)
            }
            if name == "span" and attrs.get("class") != "tg-spoiler":
                raise MarkupError('"span" needs class="tg-spoiler"')
            builder.open(name, _HTML_TAGS[name], attrs)
        position = tag.end()
    builder.add_text(markup[position:])
    return builder.finish()


_MD_RESERVED = frozenset("_*[]()~`>#+-=|{}.!")
_MD_MARKERS = (
    ("__", "underline"),
    ("||", "spoiler"),
    ("*", "bold"),
    ("_", "italic"),
    ("~", "strikethrough"),
)


def parse_markdown_v2(markup: str) -> tuple[str, list[dict[str, Any]]]:
    """Telegram's MarkdownV2: the visible text and its entities, or MarkupError."""
    builder = _EntityBuilder()
    i, n = 0, len(markup)
    line_start, in_quote = True, False
    while i < n:
        ch = markup[i]
        if line_start and ch == ">":
            if not in_quote:
                builder.open(">", "blockquote", {})
                in_quote = True
            i, line_start = i + 1, False
            continue
        if in_quote and line_start:
            builder.close(">")
            in_quote = False
        line_start = False
        if ch == "\\":
            if i + 1 >= n or not 1 <= ord(markup[i + 1]) <= 126:
                raise MarkupError("character '\\' is reserved and must be escaped")
            builder.add_text(markup[i + 1])
            i += 2
            continue
        if ch == "`":
            i = _md_code(markup, i, builder)
            continue
        marker = next(((m, kind) for m, kind in _MD_MARKERS if markup.startswith(m, i)), None)
        if marker is not None:
            text, kind = marker
            if builder.stack and builder.stack[-1].tag == text:
                builder.close(text)
            elif any(entry.tag == text for entry in builder.stack):
                raise MarkupError(f"can't find end of {kind} entity at byte offset {i}")
            else:
                builder.open(text, kind, {})
            i += len(text)
            continue
        if ch == "[":
            builder.open("[", "text_link", {"href": "pending"})
            i += 1
            continue
        if ch == "]" and builder.stack and builder.stack[-1].tag == "[":
            i = _md_link_url(markup, i, builder)
            continue
        if ch in _MD_RESERVED:
            raise MarkupError(f"character '{ch}' is reserved and must be escaped with '\\'")
        builder.add_text(ch)
        line_start = ch == "\n"
        i += 1
    if in_quote:
        builder.close(">")
    return builder.finish()


def _md_code(markup: str, i: int, builder: _EntityBuilder) -> int:
    fence = "```" if markup.startswith("```", i) else "`"
    j, body = i + len(fence), []
    language = ""
    if fence == "```":
        newline = markup.find("\n", j)
        if newline != -1 and not any(c in markup[j:newline] for c in " `"):
            language, j = markup[j:newline], newline + 1
    while True:
        if j >= len(markup):
            raise MarkupError(f"can't find end of {'pre' if fence == '```' else 'code'} entity")
        if markup[j] == "\\":
            if j + 1 >= len(markup) or markup[j + 1] not in "`\\":
                raise MarkupError("inside code only '`' and '\\' may be escaped")
            body.append(markup[j + 1])
            j += 2
            continue
        if markup.startswith(fence, j):
            break
        if markup[j] == "`":
            raise MarkupError("character '`' inside code must be escaped")
        body.append(markup[j])
        j += 1
    kind = "pre" if fence == "```" else "code"
    builder.open(fence, kind, {"language": language} if language else {})
    builder.add_text("".join(body))
    builder.close(fence)
    return j + len(fence)


def _md_link_url(markup: str, i: int, builder: _EntityBuilder) -> int:
    if not markup.startswith("(", i + 1):
        raise MarkupError("a link's text must be followed by '(url)'")
    j, url = i + 2, []
    while j < len(markup) and markup[j] != ")":
        if markup[j] == "\\" and j + 1 < len(markup):
            j += 1
        url.append(markup[j])
        j += 1
    if j >= len(markup):
        raise MarkupError("can't find end of a link's URL")
    builder.stack[-1].attrs["href"] = "".join(url)
    builder.close("[")
    return j + 1


def visible_text(text: str, parse_mode: str | None) -> tuple[str, list[dict[str, Any]]]:
    mode = (parse_mode or "").lower()
    if mode == "html":
        return parse_html(text)
    if mode == "markdownv2":
        return parse_markdown_v2(text)
    return text, []
