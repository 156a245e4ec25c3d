"""The Matrix channel's pure parts: event content and its size, the since store, txn keys."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bus import OutboundMessage
from channels.matrix.channel import SinceStore, since_path
from channels.matrix.content import (
    MAX_CONTENT_BYTES,
    MAX_EDIT_CONTENT_BYTES,
    decode,
    edit_content,
    encode,
    message_content,
    size_of,
)
from channels.outbound.delivery import delivery_key, delivery_uuid


def test_encode_is_the_content_as_sent_and_decode_gives_it_back() -> None:
    encoded = encode("# Title\n\n```python\nprint('hi')\n```")
    content = decode(encoded)
    assert content["body"] == "# Title\n\n```python\nprint('hi')\n```"
    assert content["formatted_body"].startswith("<h1>Title</h1>")
    assert '<pre><code class="language-python">' in content["formatted_body"]
    assert len(encoded.encode()) == size_of(content)


def test_plain_text_needs_no_html() -> None:
    assert message_content("just words") == {"msgtype": "m.text", "body": "just words"}


def test_text_that_only_looks_like_json_stays_text() -> None:
    for text in ('{"body": "x"}', '{"body":', "{}"):
        assert decode(text) == {"msgtype": "m.text", "body": text}


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_an_edit_of_any_content_that_fits_also_fits(unit: str) -> None:
    text = unit * (MAX_CONTENT_BYTES // max(1, len(unit.encode("utf-8", "surrogatepass")) * 3))
    new = decode(encode(text))
    if size_of(new) > MAX_CONTENT_BYTES:
        return  # the splitter never sends this; not what this checks
    edit = edit_content(new, "$event:server")
    assert size_of(edit) <= MAX_EDIT_CONTENT_BYTES
    assert edit["m.new_content"] == new
    assert str(edit["body"]).startswith("*")


def test_the_since_token_is_written_atomically_and_read_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = since_path(tmp_path, "@octos:example.org")
        store = SinceStore(path)
        assert await store.load() is None
        await store.save("s42")
        assert json.loads(path.read_text()) == {"next_batch": "s42"}
        assert not list(path.parent.glob("*.tmp"))
        assert await SinceStore(path).load() == "s42"

    asyncio.run(scenario())


def test_a_corrupt_since_file_starts_afresh(tmp_path: Path) -> None:
    path = since_path(tmp_path, "@octos:example.org")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert asyncio.run(SinceStore(path).load()) is None


def test_the_since_file_name_is_safe_for_any_user_id(tmp_path: Path) -> None:
    path = since_path(tmp_path, "@../../etc:passwd")
    assert path.parent == tmp_path / "matrix"
    assert "/" not in path.name


def test_delivery_keys_are_stable_per_part_and_distinct_between_parts() -> None:
    def part(text: str, delivery_id: str | None) -> OutboundMessage:
        return OutboundMessage(
            channel="matrix", chat_id="!r:x", content=text, delivery_id=delivery_id
        )

    assert delivery_key(part("a", "turn-1")) == delivery_key(part("a", "turn-1"))
    assert delivery_key(part("a", "turn-1")) != delivery_key(part("b", "turn-1"))
    assert delivery_key(part("a", "turn-1")) != delivery_key(part("a", "turn-2"))
    assert delivery_key(part("a", None)) != delivery_key(part("a", None))
    assert delivery_uuid(part("a", "turn-1")) == delivery_uuid(part("a", "turn-1"))
    assert len(delivery_uuid(part("a", "turn-1"))) == 36


def test_an_edit_of_content_too_big_to_fit_ends_with_the_shortest_fallback() -> None:
    new = message_content("x" * (MAX_EDIT_CONTENT_BYTES + 10))
    edit = edit_content(new, "$event:server")
    assert edit["body"] == "*"  # the homeserver will refuse it as too large; no endless loop
