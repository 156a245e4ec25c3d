"""Markdown to Slack mrkdwn: examples, and properties that hold for any input."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.markup.slack import escape, render_mrkdwn


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __bold__", "*bold* and *bold*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("~~struck~~", "~struck~"),
        ("***both***", "_*both*_"),
        (
            "[the docs](https://example.com/a?b=1&c=2)",
            "<https://example.com/a?b=1&amp;c=2|the docs>",
        ),
        ("[**bold** label](https://e.com)", "<https://e.com|bold label>"),
        ("<https://e.com/x>", "<https://e.com/x>"),
        ("[mail](mailto:a@b.c)", "<mailto:a@b.c|mail>"),
        ("[odd](https://e.com/a|b>c)", "<https://e.com/a%7Cb%3Ec|odd>"),
        ("[local](/relative/path)", "local (/relative/path)"),
        ("# Title\n\nText", "*Title*\n\nText"),
        ("## **Bold** title", "*Bold title*"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("use `x < 3` here", "use `x &lt; 3` here"),
        ("```python\nif a < b:\n    pass\n```", "```\nif a &lt; b:\n    pass\n```"),
        ("    indented code", "```\nindented code\n```"),
        ("- one\n- two\n  - nested", "• one\n• two\n    • nested"),
        ("3. three\n4. four", "3. three\n4. four"),
        ("> quoted\n> lines", "> quoted\n> lines"),
        ("> a\n>\n> b", "> a\n>\n> b"),
        ("> > nested\n> outer", "> nested\n> outer"),
        ("- item\n\n  > quoted", "• item\n&gt; quoted"),
        ("line one\nline two", "line one\nline two"),
        ("---", "──────────"),
        ("| a | b |\n|---|---|\n| 1 | 22 |", "```\na | b\n--+---\n1 | 22\n```"),
        ("中文 **粗体** 😀", "中文 *粗体* 😀"),
        ("", ""),
    ],
)
def test_examples(markdown: str, mrkdwn: str) -> None:
    assert render_mrkdwn(markdown) == mrkdwn


_GENERATED_LINK = re.compile(r"<[^<>|\s]+(?:\|[^<>]*)?>")
_QUOTE_MARKERS = re.compile(r"^(?:> ?)+", re.MULTILINE)
_ENTITY = re.compile(r"&(?:amp|lt|gt);")

#: Markdown's building blocks, so generated texts hold links, fences, quotes and emphasis.
_PIECES = [
    *"ab c\n*_~`#>-[]()<&|!.1",
    *("http://e.com/", "https://x.org/?q=1&r=2", "中文", "😀", "```", "**", "~~", "\n\n"),
    *("[a <b>](https://e.com/x?y=<1>&z)", "<https://x.org/p>", "](http://e.com/|x)"),
]
markdownish = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(markdownish)
def test_no_raw_control_characters_outside_generated_markup(markdown: str) -> None:
    rendered = render_mrkdwn(markdown)
    bare = _QUOTE_MARKERS.sub("", _GENERATED_LINK.sub("", rendered))
    assert "<" not in bare
    assert ">" not in bare
    assert "&" not in _ENTITY.sub("", rendered)


code_text = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc"), blacklist_characters="`\r\u2028\u2029\x85"
    ),
    min_size=1,
    max_size=40,
).filter(lambda text: text.strip() == text and text.strip())


@settings(max_examples=200, deadline=None)
@given(code_text)
def test_code_spans_keep_their_content(code: str) -> None:
    assert f"`{escape(code)}`" in render_mrkdwn(f"see `{code}` here")


@settings(max_examples=200, deadline=None)
@given(st.lists(code_text, min_size=1, max_size=5))
def test_code_blocks_keep_their_content(lines: list[str]) -> None:
    code = "\n".join(lines)
    assert render_mrkdwn(f"```js\n{code}\n```") == f"```\n{escape(code)}\n```"
