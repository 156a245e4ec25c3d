"""Markdown to Telegram HTML and MarkdownV2: examples, and properties over any input."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.markup.telegram import render, render_html, render_markdown_v2
from tests.fakes.telegram_server import parse_html, parse_markdown_v2

ALLOWED_TAGS = {"b", "i", "s", "code", "pre", "a", "blockquote"}
TAG = re.compile(r"</?([a-z-]+)(?:\s[^>]*)?>")
ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);")


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("**bold** *it* ~~gone~~ `x<y`", "<b>bold</b> <i>it</i> <s>gone</s> <code>x&lt;y</code>"),
        ("**bold _both_**", "<b>bold <i>both</i></b>"),
        ("# Title *x*", "<b>Title <i>x</i></b>"),
        ("[docs](https://e.com/?a=1&b=2)", '<a href="https://e.com/?a=1&amp;b=2">docs</a>'),
        # markdown-it refuses script links outright; relative ones Telegram could not open.
        ("[run](javascript:alert(1))", "[run](javascript:alert(1))"),
        ("[local](notes.md)", "local (notes.md)"),
        ("<b>raw</b> html", "&lt;b&gt;raw&lt;/b&gt; html"),
        ("- one\n- two", "• one\n• two"),
        ("3. three\n4. four", "3. three\n4. four"),
        ("- a\n  - nested", "• a\n  • nested"),
        ("> quote\n>> nested", "<blockquote>quote\n\nnested</blockquote>"),
        (
            "```py\nif a < b:\n    pass\n```",
            '<pre><code class="language-py">if a &lt; b:\n    pass</code></pre>',
        ),
        ("```\nplain\n```", "<pre>plain</pre>"),
        ("```\n\n```", ""),
        ("line one\nline two", "line one\nline two"),
        ("para one\n\npara two", "para one\n\npara two"),
        ("---", "———"),
        ("| a | bb |\n|---|---|\n| 1 | 2 |", "<pre>a | bb\n--+---\n1 | 2</pre>"),
        ("![chart](https://e.com/c.png)", '<a href="https://e.com/c.png">chart</a>'),
        ("[`code` in link](https://e.com)", '<a href="https://e.com">code in link</a>'),
    ],
)
def test_html_examples(markdown: str, html: str) -> None:
    assert render_html(markdown) == html


@pytest.mark.parametrize(
    ("markdown", "v2"),
    [
        ("1.5 + 2 = 3.5!", "1\\.5 \\+ 2 \\= 3\\.5\\!"),
        ("**bold** *it* ~~gone~~", "*bold* _it_ ~gone~"),
        ("`a\\b` and `x`", "`a\\\\b` and `x`"),
        ("[docs](https://e.com/a_(b))", "[docs](https://e.com/a_(b\\))"),
        ("*a*_b_", "_a_**_b_"),
        ("> quoted\n> lines", ">quoted\n>lines"),
        ("```js\nlet s = `t`;\n```", "```js\nlet s = \\`t\\`;\n```"),
        ("- item (1)", "• item \\(1\\)"),
    ],
)
def test_markdown_v2_examples(markdown: str, v2: str) -> None:
    assert render_markdown_v2(markdown) == v2
    parse_markdown_v2(v2)


def test_none_mode_leaves_the_markdown_alone() -> None:
    assert render("**x** <y>", "none") == "**x** <y>"


def test_rendered_html_is_what_telegram_shows() -> None:
    visible, entities = parse_html(render_html("**Hi** 😀 [there](https://e.com)"))
    assert visible == "Hi 😀 there"
    assert [(e["type"], e["offset"], e["length"]) for e in entities] == [
        ("bold", 0, 2),
        ("text_link", 6, 5),  # the emoji takes two UTF-16 units
    ]


# Properties ################################################################################

_PIECES = [
    "**", "*", "_", "__", "~~", "`", "```", "```py\n", "\n```\n", "\n", "\n\n", "> ", ">> ",
    "- ", "1. ", "# ", "[", "]", "(", ")", "[link](https://e.com/x_(y))", "[bad](javascript:x)",
    "![img](https://e.com/i.png)", "<b>", "</i>", "<", ">", "&", "&amp;", "&lt;", "\\", "|",
    "| a | b |\n|---|---|\n| 1 | 2 |\n", "---\n", "    indented code\n", "!", ".", "#", "+",
    "=", "{", "}", "😀", "👨‍👩‍👧", "🇩🇪", "你好", "。", "word", " ", "tab\t",
]  # fmt: skip
markdown_text = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=5)), max_size=40).map(
    "".join
)
plain_words = st.lists(
    st.sampled_from(["hello", "world", "你好", "世界", "😀", "🇩🇪", "Ünïcödé", " ", "\n"]),
    max_size=30,
).map("".join)


def assert_strict_html(html: str) -> None:
    """Only Telegram's tags, and no `<`, `>` or `&` outside tags and entities."""
    for name in TAG.findall(html):
        assert name in ALLOWED_TAGS, name
    text = ENTITY.sub("", TAG.sub("", html))
    assert not set(text) & set("<>&"), text


@settings(max_examples=300, deadline=None)
@given(markdown_text)
def test_any_markdown_renders_to_html_telegram_accepts(markdown: str) -> None:
    html = render_html(markdown)
    parse_html(html)  # raises on unbalanced or misnested tags
    assert_strict_html(html)


@settings(max_examples=300, deadline=None)
@given(markdown_text)
def test_any_markdown_renders_to_markdown_v2_telegram_accepts(markdown: str) -> None:
    parse_markdown_v2(render_markdown_v2(markdown))


@settings(max_examples=200, deadline=None)
@given(markdown_text)
def test_both_dialects_show_the_same_characters(markdown: str) -> None:
    html_visible, _ = parse_html(render_html(markdown))
    v2_visible, _ = parse_markdown_v2(render_markdown_v2(markdown))
    assert "".join(html_visible.split()) == "".join(v2_visible.split())


@settings(max_examples=200, deadline=None)
@given(plain_words)
def test_plain_text_loses_no_character(text: str) -> None:
    visible, _ = parse_html(render_html(text))
    assert "".join(visible.split()) == "".join(text.split())
