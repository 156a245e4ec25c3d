from __future__ import annotations

import pytest

from gateway.agents.stream_decode import (
    LineSplitter,
    NdjsonDecoder,
    SseDataDecoder,
    StreamFormatError,
)


def feed_all(decoder: SseDataDecoder | NdjsonDecoder, chunks: list[bytes]) -> list[str]:
    out: list[str] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out + decoder.finish()


def test_lines_end_with_lf_crlf_or_lone_cr() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"one\ntwo\r\nthree\rfour") == ["one", "two", "three"]
    assert splitter.finish() == ["four"]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"one\r") == []
    assert splitter.feed(b"\ntwo\r") == ["one"]
    assert splitter.feed(b"\n") == ["two"]
    assert splitter.finish() == []


def test_a_lone_cr_at_a_chunk_end_ends_the_line_once_more_arrives() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"one\r") == []
    assert splitter.feed(b"two\n") == ["one", "two"]


def test_multibyte_character_split_across_chunks_is_kept_whole() -> None:
    encoded = "données 数据\n".encode()
    splitter = LineSplitter()
    lines = [line for byte in encoded for line in splitter.feed(bytes([byte]))]
    assert lines == ["données 数据"]


def test_line_past_the_cap_is_refused() -> None:
    splitter = LineSplitter(max_line_bytes=10)
    assert splitter.feed(b"short\n") == ["short"]
    with pytest.raises(StreamFormatError):
        splitter.feed(b"x" * 11)


def test_invalid_utf8_is_refused() -> None:
    with pytest.raises(StreamFormatError):
        LineSplitter().feed(b"\xff\n")


def test_sse_events_data_comments_and_multiline_data() -> None:
    body = [
        b": a comment\n",
        b"event: delta\nid: 1\ndata: first\n\n",
        b"data: two\ndata: lines\n\n",
        b"retry: 100\ndata:no space\n\n",
        b"data: [DONE]\n\n",
    ]
    assert feed_all(SseDataDecoder(), body) == ["first", "two\nlines", "no space", "[DONE]"]


def test_sse_event_cut_into_tiny_chunks() -> None:
    body = b'data: {"text": "h\xc3\xa9"}\r\n\r\ndata: [DONE]\r\n\r\n'
    chunks = [body[i : i + 3] for i in range(0, len(body), 3)]
    assert feed_all(SseDataDecoder(), chunks) == ['{"text": "hé"}', "[DONE]"]


def test_sse_last_event_without_blank_line_is_still_delivered() -> None:
    assert feed_all(SseDataDecoder(), [b"data: a\n\ndata: last"]) == ["a", "last"]


def test_ndjson_skips_blank_lines_and_keeps_the_last_unterminated_line() -> None:
    body = [b'{"text": "a"}\n\n', b'  \n{"text": "b"}\n{"te', b'xt": "c"}']
    assert feed_all(NdjsonDecoder(), body) == ['{"text": "a"}', '{"text": "b"}', '{"text": "c"}']
